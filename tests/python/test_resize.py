"""F.interpolate / nn.Upsample through trainrt.RTModule (ONNX Resize in the engine) against PyTorch
eager: outputs, input and parameter gradients for every mode torch has (nearest, nearest-exact,
linear, bilinear, bicubic, trilinear, antialiased bilinear and bicubic), by scale factor and by size,
align_corners both ways, up and down, non-integer factors; a small U-Net-style model trained a few
SGD steps; a dynamic batch; and the refusal of an input without the batch and channel dims."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import trainrt


class Interpolate(nn.Module):
    """A 1x1 convolution (parameters whose gradients pass through the resize) then F.interpolate."""

    def __init__(self, dims: int, **kwargs):
        super().__init__()
        self.conv = (nn.Conv1d, nn.Conv2d, nn.Conv3d)[dims - 1](2, 3, 1)
        self.kwargs = kwargs

    def forward(self, x):
        return F.interpolate(self.conv(x), **self.kwargs)


CASES = [
    (2, dict(scale_factor=2, mode="nearest")),
    (2, dict(scale_factor=0.5, mode="nearest")),
    (2, dict(size=(5, 11), mode="nearest")),
    (2, dict(size=(3, 4), mode="nearest")),  # downscale by a size: floor(dst * in / out)
    (2, dict(scale_factor=1.7, mode="nearest-exact")),
    (1, dict(scale_factor=1.7, mode="nearest")),  # dst 17: 17 / 1.7 is 10 exactly; torch's f32 reads 10
    (1, dict(scale_factor=1.7, mode="nearest-exact")),  # dst 8: (8 + 0.5) / 1.7 is 5 exactly
    (2, dict(scale_factor=2.1, mode="nearest")),  # 2.1 * (6, 8) floors to twice the size: torch halves dst
    (2, dict(size=(7, 5), mode="nearest-exact")),
    (2, dict(scale_factor=2, mode="bilinear")),
    (2, dict(scale_factor=(1.5, 0.7), mode="bilinear")),
    (2, dict(size=(9, 4), mode="bilinear")),
    (2, dict(size=(1, 3), mode="bilinear")),  # an output of one pixel: torch reads the centre
    (2, dict(scale_factor=1.7, mode="bilinear", align_corners=True)),  # align_corners ignores the factor
    (2, dict(size=(5, 13), mode="bilinear", align_corners=True)),
    (2, dict(scale_factor=2, mode="bicubic")),
    (2, dict(size=(5, 3), mode="bicubic", align_corners=True)),
    (2, dict(scale_factor=0.5, mode="bilinear", antialias=True)),
    (2, dict(size=(3, 5), mode="bilinear", antialias=True)),
    (2, dict(scale_factor=0.4, mode="bicubic", antialias=True)),
    (2, dict(scale_factor=2, mode="bilinear", antialias=True)),  # antialias upscaling: plain bilinear
    (1, dict(scale_factor=3, mode="linear")),
    (1, dict(size=5, mode="nearest")),
    (1, dict(size=17, mode="linear", align_corners=True)),
    (3, dict(scale_factor=2, mode="trilinear")),
    (3, dict(scale_factor=(1, 2, 1.5), mode="nearest")),
]
SPATIAL = {1: (12,), 2: (6, 8), 3: (3, 4, 5)}


@pytest.mark.parametrize("dims, kwargs", CASES, ids=[f"{d}d-" + "-".join(f"{k}={v}" for k, v in kw.items()) for d, kw in CASES])
def test_interpolate_matches_torch(dims, kwargs):
    torch.manual_seed(0)
    eager = Interpolate(dims, **kwargs)
    ours = trainrt.RTModule(copy.deepcopy(eager))
    x = torch.randn(2, 2, *SPATIAL[dims])
    results = []
    for m in (eager, ours):
        xi = x.clone().requires_grad_(True)
        out = m(xi)
        w = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
        (out * w).sum().backward()
        results.append((out.detach(), xi.grad, {n: p.grad for n, p in m.named_parameters()}))
    assert ours.fallback_reason is None, ours.fallback_reason
    (ye, gxe, gpe), (yo, gxo, gpo) = results
    assert yo.shape == ye.shape
    torch.testing.assert_close(yo, ye, rtol=1e-5, atol=1e-5, msg="output")
    torch.testing.assert_close(gxo, gxe, rtol=1e-5, atol=1e-5, msg="input gradient")
    for name in gpe:
        torch.testing.assert_close(gpo[name], gpe[name], rtol=1e-5, atol=1e-4, msg=name)


class PinnedSpatial(Interpolate):
    """Interpolate after a reshape to literal spatial sizes, which makes export keep them static."""

    def forward(self, x):
        return super().forward(x.reshape(-1, 2, *SPATIAL[x.dim() - 2]))


NEAREST = [(d, kw) for d, kw in CASES if kw["mode"].startswith("nearest")]


@pytest.mark.parametrize("dims, kwargs", NEAREST, ids=[f"{d}d-" + "-".join(f"{k}={v}" for k, v in kw.items()) for d, kw in NEAREST])
def test_nearest_with_static_spatial_dims_reads_torchs_pixels(dims, kwargs):
    """Static dims take the other path: the indices are constants from torch's own kernel."""
    torch.manual_seed(0)
    eager = PinnedSpatial(dims, **kwargs)
    ours = trainrt.RTModule(copy.deepcopy(eager))
    x = torch.randn(2, 2, *SPATIAL[dims], requires_grad=True)
    y = ours(x)
    assert ours.fallback_reason is None, ours.fallback_reason
    torch.testing.assert_close(y, eager(x), rtol=1e-6, atol=1e-6)


class TinyUNet(nn.Module):
    """Down (stride-2 conv), up (nn.Upsample bilinear), a skip concat: a decoder as segmentation and
    diffusion models have them."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Conv2d(3, 8, 3, padding=1)
        self.down = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.up_nearest = nn.Upsample(scale_factor=2, mode="nearest")
        self.dec = nn.Conv2d(8 + 16 + 16, 4, 3, padding=1)

    def forward(self, x):
        e = F.relu(self.enc(x))
        d = F.relu(self.down(e))
        return self.dec(torch.cat([e, self.up(d), self.up_nearest(d)], dim=1))


def test_unet_trains_like_torch_with_sgd_momentum():
    torch.manual_seed(0)
    eager = TinyUNet()
    ours = trainrt.RTModule(copy.deepcopy(eager))
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.05, momentum=0.9)
    opt_o = torch.optim.SGD(ours.parameters(), lr=0.05, momentum=0.9)
    for step in range(4):
        x, target = torch.randn(2, 3, 8, 8), torch.randint(0, 4, (2, 8, 8))
        losses = []
        for m, opt in ((eager, opt_e), (ours, opt_o)):
            opt.zero_grad()
            loss = F.cross_entropy(m(x), target)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert ours.fallback_reason is None, ours.fallback_reason
        assert losses[1] == pytest.approx(losses[0], rel=1e-5), f"step {step}"
    for (name, pe), po in zip(eager.named_parameters(), ours.parameters()):
        torch.testing.assert_close(po, pe, rtol=1e-4, atol=1e-5, msg=name)


def test_a_new_batch_size_resizes_without_falling_back():
    torch.manual_seed(0)
    eager = Interpolate(2, scale_factor=2, mode="bilinear")
    ours = trainrt.RTModule(copy.deepcopy(eager))
    for batch in (2, 3, 5):
        x = torch.randn(batch, 2, 4, 6)
        torch.testing.assert_close(ours(x), eager(x), rtol=1e-5, atol=1e-5)
    assert ours.fallback_reason is None, ours.fallback_reason


def test_bf16_mixed_precision_upsamples_in_the_engine():
    torch.manual_seed(0)
    eager = Interpolate(2, scale_factor=2, mode="bilinear")
    ours = trainrt.RTModule(copy.deepcopy(eager), mixed_precision="bf16")
    x = torch.randn(2, 2, 4, 6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = eager(x)
    got = ours(x)
    assert ours.fallback_reason is None, ours.fallback_reason
    assert got.dtype == expected.dtype == torch.bfloat16  # autocast leaves upsampling in the input's dtype
    torch.testing.assert_close(got.float(), expected.float(), rtol=2e-2, atol=2e-2)


def test_nearest_index_formula_matches_eager_on_a_grid():
    """The indices the translation computes (constants, or the same f32 arithmetic in the graph)
    against eager nearest and nearest-exact of 1, 2 and 3 spatial dims, over sizes and factors
    where f32 rounding decides ties; 2-D nearest also takes torch's m == n and m == 2 n shortcuts."""
    from trainrt.capture.ops_resize import _static_nearest_index

    for dims in (1, 2, 3):
        for exact in (False, True):
            for n in range(1, 25):
                for scale, size in [(s, None) for s in (0.3, 0.7, 1.0, 1.05, 1.7, 2.0, 2.1, 3.3)] + [
                        (None, m) for m in (1, 7, n, 2 * n, 3 * n + 1)]:
                    if size is None and int(n * scale) == 0:
                        continue  # torch refuses an empty output
                    x = torch.arange(float(n)).view(1, 1, n, *[1] * (dims - 1))
                    kw = dict(scale_factor=(scale,) + (1.0,) * (dims - 1)) if size is None else dict(size=(size,) + (1,) * (dims - 1))
                    y = F.interpolate(x, mode="nearest-exact" if exact else "nearest", **kw)
                    m = y.shape[2]
                    expected = y.reshape(m, -1)[:, 0].long().tolist()
                    got = _static_nearest_index(n, m, scale, exact, shortcuts=dims == 2 and not exact)
                    assert got == expected, (dims, exact, n, scale, size)


def _resize_model(inputs: list, scales=None, sizes=None, **attrs) -> bytes:
    from onnx import TensorProto, helper, numpy_helper
    import numpy as np

    inits = []
    if scales is not None:
        inits.append(numpy_helper.from_array(np.array(scales, np.float32), "scales"))
    if sizes is not None:
        inits.append(numpy_helper.from_array(np.array(sizes, np.int64), "sizes"))
    node = helper.make_node("Resize", inputs, ["y"], name="up1", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]).SerializeToString()


@pytest.mark.parametrize("inputs, scales, sizes, attrs, error, match", [
    (["x", "", "scales"], [1, 2], None, {}, trainrt.ShapeError, "up1.*scales has 2 values, expected 4"),
    (["x", "", "scales", "sizes"], [1, 1, 2, 2], [1, 1, 4, 4], {}, trainrt.ShapeError, "up1.*both given"),
    (["x", "", "scales"], [1, 1, 2, 2], None, {"mode": "area"}, trainrt.UnsupportedOp, "up1.*mode 'area'"),
    (["x", "", "scales"], [1, 1, 2, 2], None, {"mode": "nearest", "antialias": 1}, trainrt.UnsupportedOp,
     "up1.*antialias applies to linear and cubic"),
    (["x", "", "", "sizes"], None, [4, 4], {"axes": [2, 5]}, trainrt.ShapeError, "up1.*axis 5 is out of range"),
])
def test_a_malformed_resize_is_refused_naming_the_node(inputs, scales, sizes, attrs, error, match):
    import numpy as np

    with pytest.raises(error, match=match):
        trainrt.Session(_resize_model(inputs, scales, sizes, **attrs)).run([np.ones((1, 1, 2, 2), np.float32)])
