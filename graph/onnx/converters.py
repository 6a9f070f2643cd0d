"""Every ONNX converter module, imported here and only here for its registrations, and the
converters of the ops whose forms live in several modules.

registry.py refuses a second converter for an op, so each op has one; where its forms are
converted in different modules, the one converter is composed here from them, each form
handling its inputs' rank and handing the others on (so the order modules are imported in
decides nothing).
"""
from __future__ import annotations

from . import (attention, bits, cache, control, conv3d, convtranspose3d, core, datadep,
               deform, experimental, function_ops, lowbit, mel, ml, more, norm, ordering,
               pool3d, quant, quant_contrib, recurrent, roi, sequence, signal, spatial,
               training)
from .registry import register

MODULES = (core, more, attention, bits, cache, control, conv3d, convtranspose3d, datadep,
           deform, experimental, function_ops, lowbit, mel, ml, norm, ordering, pool3d, quant,
           quant_contrib, recurrent, roi, sequence, signal, spatial, training)

# 5-D inputs: conv3d.py; 3-D: spatial.py (as 2-D); 4-D: core.py
register("Conv", conv3d.conv_3d(spatial.windowed_1d(core.convert_conv)), __name__)
register("ConvTranspose", convtranspose3d.conv_transpose_3d(
    spatial.windowed_1d(core.convert_conv_transpose)), __name__)
# 5-D inputs: pool3d.py; 3-D: spatial.py (as 2-D); 4-D: core.py
register("AveragePool", pool3d.windowed_3d(spatial.windowed_1d(core.convert_average_pool)),
         __name__)
# 5-D inputs without Indices: pool3d.py; else ordering.py (the Indices output; 3-D inputs
# through spatial.py, 4-D through core.py)
register("MaxPool", pool3d.windowed_3d(ordering.max_pool_with_indices), __name__)
