"""The quantized (int8/uint8) TE operators: quantize/requantize and the integer GEMMs and
convs in their packed, paired, permuted and VNNI-panel forms."""
