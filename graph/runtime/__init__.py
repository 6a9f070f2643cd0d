"""Running compiled models: the executor (CompiledModel), per-shape DynamicModel and the
StagedModel for data-dependent ops."""
