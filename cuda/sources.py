"""CUDA sources of pymf (the repository's cuda/ folder, installed as pymf.cuda; this module
is pymf.cuda.sources).

cuda/ has no __init__.py on purpose: a regular package named `cuda` in the repository root
would shadow NVIDIA's `cuda` namespace (cuda.bindings, cuda.pathfinder) whenever the root is
on sys.path, and CuPy, which imports it, would then fail to load from a source checkout.

The kernels are plain .cu files loaded at run time by pymf.gpu; they include the C core's
headers (common.h, linalg.h, philox.h, tweedie.h) so the per-entry maths has one copy.

Where nvcc is present at install time, setup.py also builds psgld.fatbin (cubins for sm_80
and sm_90, PTX for later GPUs) beside them, with the digest of the text it was built from:
a GPU machine with a driver but no CUDA toolkit can then load the kernels without
compiling. This module holds no GPU code and needs nothing but the standard library, so
setup.py can use it before pymf is built.
"""
import hashlib
import os
import subprocess

FATBIN = "psgld.fatbin"
FATBIN_DIGEST = FATBIN + ".sha256"
# real code for the data-centre GPUs the kernels are written for, and PTX that later
# architectures compile at load time
FATBIN_TARGETS = ("arch=compute_80,code=sm_80", "arch=compute_90,code=sm_90",
                  "arch=compute_90,code=compute_90")


def source_dir():
    """The folder holding the installed .cu files."""
    return os.path.dirname(os.path.abspath(__file__))


def kernel_text(source, include_dir):
    """The text the loaders compile: `source` (a .cu file) headed by a digest of the C
    headers under include_dir/pymf. pycuda's and CuPy's on-disk caches key on the source
    text, so a changed header must change the text."""
    digest = hashlib.sha256()
    headers = os.path.join(include_dir, "pymf")
    for name in sorted(os.listdir(headers)):
        if name.endswith(".h"):
            with open(os.path.join(headers, name), "rb") as fh:
                digest.update(name.encode() + b"\0" + fh.read())
    with open(source) as fh:
        return f"// pymf headers sha256 {digest.hexdigest()}\n" + fh.read()


def text_digest(text):
    return hashlib.sha256(text.encode()).hexdigest()


def build_fatbin(nvcc, text, include_dir, out_dir, timeout=900):
    """Compile `text` (kernel_text) into out_dir/psgld.fatbin and record its digest beside it.
    Returns the fatbin's path; raises RuntimeError with nvcc's message if it fails."""
    os.makedirs(out_dir, exist_ok=True)
    digest_path = os.path.join(out_dir, FATBIN_DIGEST)
    if os.path.exists(digest_path):  # an old digest must never vouch for a new fatbin
        os.remove(digest_path)
    source = os.path.join(out_dir, "psgld_fatbin_source.cu")
    target = os.path.join(out_dir, FATBIN)
    partial = target + ".partial"  # renamed into place only once nvcc has finished
    with open(source, "w") as fh:
        fh.write(text)
    gencode = [flag for arch in FATBIN_TARGETS for flag in ("-gencode", arch)]
    try:
        done = subprocess.run([nvcc, "-std=c++14", "-I", include_dir, "--fatbin", *gencode,
                               source, "-o", partial], capture_output=True, text=True,
                              timeout=timeout)
    finally:
        os.remove(source)
    if done.returncode != 0:
        if os.path.exists(partial):
            os.remove(partial)
        raise RuntimeError(f"nvcc could not build {FATBIN}: {done.stderr.strip()}")
    os.replace(partial, target)
    with open(digest_path, "w") as fh:
        fh.write(text_digest(text) + "\n")
    return target


def find_nvcc():
    """nvcc on PATH, else under $CUDA_HOME or $CUDA_PATH; None if there is none."""
    import shutil
    found = shutil.which("nvcc")
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")):
        if found is None and root and os.access(os.path.join(root, "bin", "nvcc"), os.X_OK):
            found = os.path.join(root, "bin", "nvcc")
    return found


def prebuilt_fatbin(directory, text):
    """directory/psgld.fatbin if it was built from exactly `text`, else None."""
    try:
        with open(os.path.join(directory, FATBIN_DIGEST)) as fh:
            recorded = fh.read().strip()
    except OSError:
        return None
    path = os.path.join(directory, FATBIN)
    return path if recorded == text_digest(text) and os.path.exists(path) else None
