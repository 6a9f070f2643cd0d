"""The committed tuning log (kiln.db), shipped as package data `kiln.tuning_logs`."""
