from .configuration_vanilla_transformer import VanillaTransformerConfig

__all__ = ["VanillaTransformerConfig"]
