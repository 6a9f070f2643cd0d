"""Loop IR -> loop IR passes after lowering: register-tile promotion, vector tails,
unit-loop removal and lane-uniform selects."""
