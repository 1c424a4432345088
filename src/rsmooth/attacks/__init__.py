"""Attacks shared by the training methods (PGD on the input, on the noise, DDN).

Every attack runs the model in eval mode with its parameters frozen and restores both
afterwards (:func:`frozen_eval`), as the reference code of SmoothAdv, SmoothMix and CAT-RS does
(Hadisalman/smoothing-adversarial, jh-jeong/smoothmix, alinlab/smoothing-catrs).
"""
from .base import frozen_eval
from .ddn import ddn_smoothed_input, ddn_step_sizes, smoothed_vote
from .pgd import ascent_direction, l2_normalize, pgd_smoothed_input, project_l2, smoothed_log_prob

__all__ = ["frozen_eval", "l2_normalize", "project_l2", "smoothed_log_prob", "ascent_direction",
           "pgd_smoothed_input", "ddn_smoothed_input", "ddn_step_sizes", "smoothed_vote"]
