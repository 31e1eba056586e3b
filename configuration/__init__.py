from .configuration_vanilla_transformer import (
    VanillaTransformerConfig,
    check_tokenizer_matches,
    position_limit,
    target_vocabulary_size,
)

__all__ = ["VanillaTransformerConfig", "check_tokenizer_matches", "position_limit", "target_vocabulary_size"]
