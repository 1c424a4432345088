"""Suite-wide settings.

One intra-op thread: the tests run small convolutions, for which a second OpenMP thread gains
little, and on a shared 2-core machine oversubscribed threads made them ~10x slower.
"""
import torch

torch.set_num_threads(1)
