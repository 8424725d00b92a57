"""Fixed kernels the runtime needs besides the generated ones."""

from typing import Any

import warp as wp

wp.set_module_options({"enable_backward": False})


@wp.kernel
def accumulate(dst: wp.array(dtype=Any), src: wp.array(dtype=Any)):
    """dst += src, elementwise (a user input's gradient gets the program's contribution)."""
    i = wp.tid()
    dst[i] = dst[i] + src[i]
