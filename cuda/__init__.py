"""CUDA sources of pymf (the repository's cuda/ folder, installed as pymf.cuda).

The kernels are plain .cu files loaded at run time by pymf.gpu; they include the C core's
headers (common.h, philox.h, tweedie.h) so the per-entry maths has one copy.
"""
from importlib import resources


def source_dir():
    """The folder holding the installed .cu files."""
    return resources.files(__name__)
