# Loaded by every Python process started with this folder on PYTHONPATH (run.py does that).
# Inert unless LOADERSCOPE_TORCH_SUITE=instrumented; see loaderscope_suite_patch.py.
import os

if os.environ.get("LOADERSCOPE_TORCH_SUITE") == "instrumented":
    import loaderscope_suite_patch

    loaderscope_suite_patch.install()
