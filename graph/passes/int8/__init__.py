"""Int8 passes: QDQ patterns to integer kernels, then the forms each CPU runs fastest
(pixel-major, VNNI panels, int16 pairs, lookup tables, onnxruntime-rounded adds and muls)."""
