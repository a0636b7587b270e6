"""The seed's five networks as ONNX files: seeded torchvision architectures, exported once, reused after.

resnet50_v1, vgg19_bn, inception_v3 and densenet201 are torchvision's architectures; ssd_resnet50_512
is an SSD detector on a ResNet-50 trunk (layer1-3, as in MLPerf's SSD-ResNet34 recipe) with five
extra feature levels and per-level class/box heads, on 512x512 images. Weights are random with seed 0
(no download); batch 1, float32, ONNX opset 17.

Exporting needs torch and torchvision (see notes/tvm.md section 4 for torchvision's CPU workaround),
which the project's own environment need not have: the export runs in a subprocess of ``python``
(any interpreter that has them), and an exported file is never rebuilt.

Example::

    from benchmarks.networks import export_onnx, load_network
    path = export_onnx("resnet50_v1")                     # ~/.cache/layoutopt/models/resnet50_v1.onnx
    mod = load_network("resnet50_v1")                     # a Relax IRModule, input (1, 3, 224, 224)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from layoutopt.errors import ProblemError

#: where exported ONNX files are kept (not committed: ~100 MB each)
MODELS = Path.home() / ".cache" / "layoutopt" / "models"

#: network -> (torchvision constructor, or None for the SSD the snippet builds; keyword arguments; image size)
NETWORKS: dict[str, tuple[str | None, dict, int]] = {
    "resnet50_v1": ("resnet50", {}, 224),
    "vgg19_bn": ("vgg19_bn", {}, 224),
    "inception_v3": ("inception_v3", {"aux_logits": False, "init_weights": True}, 299),
    "densenet201": ("densenet201", {}, 224),
    "ssd_resnet50_512": (None, {}, 512),
}

#: defines ``build_model(ctor, kwargs)`` (the seeded network, eval mode) for the snippets run under torch
MODEL_SNIPPET = r"""
import json, sys, types
# torchvision's PyPI build for torch 2.13 is a CUDA build whose meta registrations fail on CPU-only
# machines; the models do not use those C ops
sys.modules.setdefault("torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations"))
import torch, torchvision
torch.manual_seed(0)

def ssd_resnet50():
    import torch.nn as nn
    trunk = torchvision.models.resnet50(weights=None)
    backbone = nn.Sequential(trunk.conv1, trunk.bn1, trunk.relu, trunk.maxpool, trunk.layer1, trunk.layer2,
                             trunk.layer3)
    def extra(cin, mid, cout, stride):
        return nn.Sequential(nn.Conv2d(cin, mid, 1), nn.BatchNorm2d(mid), nn.ReLU(),
                             nn.Conv2d(mid, cout, 3, stride=stride, padding=1), nn.BatchNorm2d(cout),
                             nn.ReLU())
    extras = nn.ModuleList([extra(1024, 256, 512, 2), extra(512, 256, 512, 2), extra(512, 128, 256, 2),
                            extra(256, 128, 256, 2), extra(256, 128, 256, 2)])
    channels, anchors, classes = [1024, 512, 512, 256, 256, 256], [4, 6, 6, 6, 4, 4], 81
    cls = nn.ModuleList([nn.Conv2d(c, a * classes, 3, padding=1) for c, a in zip(channels, anchors)])
    box = nn.ModuleList([nn.Conv2d(c, a * 4, 3, padding=1) for c, a in zip(channels, anchors)])
    class SSD(nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone, self.extras, self.cls, self.box = backbone, extras, cls, box
        def forward(self, x):
            feats = [self.backbone(x)]
            for layer in self.extras:
                feats.append(layer(feats[-1]))
            outs = [torch.flatten(h(f), 1) for f, h in zip(feats, self.cls)]
            outs += [torch.flatten(h(f), 1) for f, h in zip(feats, self.box)]
            return torch.cat(outs, 1)
    return SSD()

def build_model(ctor, kwargs):
    model = ssd_resnet50() if ctor is None else getattr(torchvision.models, ctor)(weights=None, **kwargs)
    return model.eval()
"""

_EXPORT_SNIPPET = MODEL_SNIPPET + r"""
ctor, kwargs, size, onnx_path = json.loads(sys.argv[1])
with torch.no_grad():
    torch.onnx.export(build_model(ctor, kwargs), (torch.randn(1, 3, size, size),), onnx_path,
                      input_names=["data"], output_names=["out"], dynamo=False, opset_version=17)
"""


def input_shape(network: str) -> list[int]:
    """The network's input shape, batch 1.

    Example::

        input_shape("inception_v3")     # [1, 3, 299, 299]
    """
    size = NETWORKS[_known(network)][2]
    return [1, 3, size, size]


def _known(network: str) -> str:
    if network not in NETWORKS:
        raise ProblemError(f"unknown network {network!r}; known: {', '.join(NETWORKS)}")
    return network


def export_onnx(network: str, directory: str | os.PathLike = MODELS, python: str = sys.executable) -> Path:
    """The network's ONNX file under ``directory``, exported by ``python`` (with torch) if it is missing.

    Raises:
        ProblemError: an unknown network, or the export failed (e.g. ``python`` has no torch).

    Example::

        export_onnx("vgg19_bn", python="/work/benchvenv/bin/python")
    """
    ctor, kwargs, size = NETWORKS[_known(network)]
    return export_torchvision(ctor, Path(directory) / f"{network}.onnx", size, kwargs, python, name=network)


def export_torchvision(ctor: str | None, path: str | os.PathLike, size: int = 224, kwargs: dict | None = None,
                       python: str = sys.executable, name: str | None = None) -> Path:
    """torchvision's architecture ``ctor`` (``None``: the SSD of :data:`NETWORKS`) with weights random
    from seed 0, batch 1 at ``size`` x ``size``, as an ONNX file at ``path`` (opset 17), exported by
    ``python`` (with torch and torchvision) unless the file exists.

    Raises:
        ProblemError: the export failed, naming ``name`` (default ``ctor``) and the exporter's last line.

    Example::

        export_torchvision("mobilenet_v2", "/tmp/models/mobilenet_v2.onnx")
    """
    path = Path(path)
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".onnx.partial")  # a killed export never leaves a truncated model behind
    payload = json.dumps([ctor, kwargs or {}, size, str(partial)])
    done = subprocess.run([python, "-c", _EXPORT_SNIPPET, payload], capture_output=True, text=True)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        reason = lines[-1] if lines else "no output"
        raise ProblemError(f"{name or ctor}: ONNX export with {python} failed: {reason} "
                           "(exporting needs torch and torchvision)")
    partial.replace(path)
    return path


def load_network(network: str, directory: str | os.PathLike = MODELS, python: str = sys.executable):
    """The network as a Relax ``IRModule`` (exported first if needed; see :func:`export_onnx`).

    Example::

        mod = load_network("densenet201")
    """
    from layoutopt.tvm import load_model

    return load_model(export_onnx(network, directory, python), input_shape=input_shape(network))
