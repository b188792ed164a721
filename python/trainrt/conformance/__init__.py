"""Conformance of TrainRT's kernels with the ONNX backend node tests (`python -m trainrt.conformance`)."""
