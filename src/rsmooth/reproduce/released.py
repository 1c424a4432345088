"""Tables of released models, certified as they are (no training): diffusion denoised smoothing
as Carlini, Tramer, Dvijotham, Rice, Sun, Kolter 2023, (Certified!!) Adversarial Robustness for
Free!, arXiv 2206.10550 ran it (ethz-spylab/diffusion_denoised_smoothing).

What each row runs is the authors' pipeline (``{imagenet,cifar10}/DRM.py``): OpenAI's unconditional
diffusion model (``--diffusion PRESET=FILE``, :mod:`rsmooth.models.openai_diffusion`) in front of an
off-the-shelf classifier loaded by name (:mod:`rsmooth.models.hub`) that gets the denoised image
resized bicubic with antialias and normalised with mean = std = 0.5 (``--classifier-input``), t* and
the noise as the authors pick them (the defaults of ``certify --diffusion``); the protocol is their
README's commands: ImageNet ``--skip 50 --N0 100 --N 10000``, CIFAR-10 ``--skip 1 --N0 100 --N
100000``, alpha 0.001 (``certify.py``'s default).  The files go under ``OUT/weights/``
(docs/guide/diffusion-denoised-smoothing.md says where each comes from); a GPU is needed.

Published values: only the abstract's headline is transcribed so far (:data:`PUBLISHED`); the
cells of the paper's tables are left to a transcription from the paper itself.
"""
from __future__ import annotations

from typing import Any, Dict, Tuple

from .spec import TABLES, Row, TableSpec

CITATION = ("Carlini, Tramer, Dvijotham, Rice, Sun, Kolter 2023, (Certified!!) Adversarial Robustness for "
            "Free!, arXiv 2206.10550")
#: the authors' README commands (ethz-spylab/diffusion_denoised_smoothing, README.md, "Evaluation"),
#: alpha the default of their certify.py
PROTOCOLS: Dict[str, Dict[str, Any]] = {
    "imagenet": {"n0": 100, "n": 10_000, "alpha": 0.001, "skip": 50, "max": None},
    "cifar10": {"n0": 100, "n": 100_000, "alpha": 0.001, "skip": 1, "max": None},
}
#: the noise levels certified (Cohen et al. 2019's; the authors' README runs --sigma 1.00)
SIGMAS = (0.25, 0.5, 1.0)
#: (dataset, radius, certified accuracy %, where it is printed, the words): the published values
#: transcribed so far
PUBLISHED: Tuple[Tuple[str, float, float, str, str], ...] = (
    ("imagenet", 0.5, 71.0, "arXiv 2206.10550, abstract",
     "This allows us to certify 71% accuracy on ImageNet under adversarial perturbations constrained to be "
     "within an l2 norm of eps = 0.5"),
)

IMAGENET_FLAGS = ("--checkpoint", "{weights}/beit_large_patch16_512/model.safetensors",
                  "--arch", "timm:beit_large_patch16_512", "--dataset", "imagenet",
                  "--diffusion", "guided-diffusion-imagenet256={weights}/256x256_diffusion_uncond.pt",
                  "--classifier-input", "size=512,mode=bicubic,mean=0.5,std=0.5")
CIFAR10_FLAGS = ("--checkpoint", "{weights}/vit-base-patch16-224-in21k-finetuned-cifar10",
                 "--arch", "transformers", "--dataset", "cifar10",
                 "--diffusion", "improved-diffusion-cifar10={weights}/cifar10_uncond_50M_500K.pt",
                 "--classifier-input", "size=224,mode=bicubic,mean=0.5,std=0.5")


def _table(table_id: str, dataset: str, what: str, flags: Tuple[str, ...], cost_arch: str,
           radii: Tuple[float, ...]) -> TableSpec:
    rows = tuple(Row(dataset, "diffusion", s, f"Diffusion denoised smoothing ({what})", released=flags,
                     cost_arch=cost_arch) for s in SIGMAS)
    published = "; ".join(f"{acc:g}% at radius {r:g} ({where})" for d, r, acc, where, _ in PUBLISHED if d == dataset)
    title = (f"{CITATION}: {dataset}, {what}, released models certified at sigma "
             f"{'/'.join(f'{s:g}' for s in SIGMAS)} with the authors' protocol; published: "
             f"{published or 'not transcribed'}")
    return TableSpec(table_id, title, rows, radii, lambda d: dict(PROTOCOLS[d]), citation=CITATION,
                     reference=f"{CITATION}, {dataset}")


@TABLES.register("carlini:imagenet")
def _imagenet() -> TableSpec:
    return _table("carlini:imagenet", "imagenet", "guided-diffusion 256x256 + BEiT-large 512", IMAGENET_FLAGS,
                  "guided-diffusion-256+beit-large-512", (0.0, 0.5, 1.0, 1.5, 2.0, 3.0))


@TABLES.register("carlini:cifar10")
def _cifar10() -> TableSpec:
    return _table("carlini:cifar10", "cifar10", "improved-diffusion + ViT-B/16 224", CIFAR10_FLAGS,
                  "improved-diffusion-cifar10+vit-b16-224", (0.0, 0.25, 0.5, 0.75, 1.0))
