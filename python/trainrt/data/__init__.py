"""`trainrt.data`: samplers that keep DDP ranks in step on variable-size samples .

    from trainrt.data import LoadBalancingDistributedSampler, LoadBalancingDistributedBatchSampler

Drop-in for onnxruntime.training.utils.data's samplers of the same names and arguments: each rank gets
samples of about the same total complexity and the same number of batches (sampler.py, batch_sampler.py
say how and what bound holds).
"""

from trainrt.data.batch_sampler import LoadBalancingDistributedBatchSampler
from trainrt.data.sampler import LoadBalancingDistributedSampler

__all__ = ["LoadBalancingDistributedSampler", "LoadBalancingDistributedBatchSampler"]
