"""Models: the normalisation layer, the field's architectures and checkpoint loading.

``create_model(arch, dataset)`` returns ``nn.Sequential(Normalize(mean, std), net)`` so
inputs are [0, 1] pixels (the noise of randomized smoothing is added before normalisation) and
the net's keys are ``1.xxx`` as in the public checkpoints of Cohen et al. 2019 (arXiv
1902.02918) and the later codebases. Architectures: ``lenet`` (LeCun et al. 1998, field
variant), ``digits_cnn``, ``cifar_resnet20`` / ``cifar_resnet110`` (He et al. 2016, arXiv
1512.03385), ``densenet40`` (Huang et al. 2017, arXiv 1608.06993), ``cifar_densenet40``
(Jeong & Shin's code), ``resnet50``; any other as ``package.module:factory``, an entry point of
group ``rsmooth.models`` or ``register_model(name, factory)``.
"""
from . import cifar_resnet, densenet, resnet, small  # noqa: F401  (register the archs)
from .checkpoint_compat import canonical_state_dict, load_weights, strip_wrapper_prefixes
from .factory import (ENTRY_POINT_GROUP, MODEL_OPTIONS, MODELS, ArchSpec, arch_names, arch_ref, count_parameters,
                      create_model, default_arch, register_model, resolve_arch)
from .normalize import Normalize
from .dncnn import DENOISERS, DnCNN, create_denoiser  # noqa: F401  (denoised smoothing)

__all__ = [
    "ENTRY_POINT_GROUP",
    "MODEL_OPTIONS",
    "MODELS",
    "ArchSpec",
    "Normalize",
    "arch_names",
    "arch_ref",
    "canonical_state_dict",
    "count_parameters",
    "create_model",
    "default_arch",
    "load_weights",
    "register_model",
    "resolve_arch",
    "strip_wrapper_prefixes",
]
