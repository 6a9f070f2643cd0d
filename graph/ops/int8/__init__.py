"""The quantized graph ops (int8/uint8 kernels, their packed and pixel-major forms)."""
