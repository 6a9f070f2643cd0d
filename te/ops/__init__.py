"""The operator library: TVM-named functions that build TE compute stages."""
from . import tags
from .broadcast import (add, broadcast_to, divide, equal, floor_divide, floor_mod, greater,
                        greater_equal, less, less_equal, logical_and, logical_not, logical_or,
                        logical_xor, maximum, minimum, multiply, not_equal, power, subtract,
                        where)
from .conv import (conv2d_nchw, conv2d_nchw_kpacked, depthwise_conv2d_nchw, pack_conv_weight,
                   unpack_conv_weight)
from .conv_transpose import (conv2d_transpose_nchw, conv2d_transpose_nchw_packed,
                             conv_transpose_weight, pack_conv_transpose_weight,
                             phase_weight_block, unpack_conv_transpose_weight)
from .conv_blocked import (conv2d_nchwc, depthwise_conv2d_nchwc, from_blocked,
                           grouped_conv2d_nchwc, grouped_conv_blocking,
                           pack_conv_weight_blocked, pack_depthwise_weight,
                           pack_grouped_conv_weight, to_blocked, unpack_conv_weight_blocked,
                           unpack_depthwise_weight, unpack_grouped_conv_weight)
from .elementwise import (abs, cast, ceil, clip, erf, exp, floor, gelu, hard_sigmoid,
                          hard_swish, leaky_relu, log, neg, reciprocal, relu, round, rsqrt,
                          sigmoid, sign, sqrt, tanh)
from .linalg import (batch_matmul, dense, matmul, matmul_prepacked, pack_matmul_weight,
                     unpack_matmul_weight)
from .nn import batch_norm_inference, layer_norm, log_softmax, softmax
from .pooling import avg_pool2d, global_avg_pool2d, global_max_pool2d, max_pool2d
from .reduction import l2_norm, max, mean, min, prod, sum
from .transform import (concatenate, expand_dims, flatten, gather, gather_nd, pad, reshape,
                        split, squeeze, strided_slice, take, transpose)

slice = strided_slice  # noqa: A001 - the brief's (and ONNX's) name
gather_elements = gather

__all__ = [name for name, value in globals().items()
           if not name.startswith("_") and (not isinstance(value, type(tags)) or value is tags)]
