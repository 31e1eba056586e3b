from .configuration_vanilla_transformer import VanillaTransformerConfig, check_tokenizer_matches

__all__ = ["VanillaTransformerConfig", "check_tokenizer_matches"]
