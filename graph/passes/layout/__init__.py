"""Layout passes: channel-blocked convs, Winograd, packed conv and matmul weights, and
moving transposes/reshapes to where they cancel."""
