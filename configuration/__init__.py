from .configuration_vanilla_transformer import (
    VanillaTransformerConfig,
    check_tokenizer_matches,
    position_limit,
    truncation_warning,
)

__all__ = ["VanillaTransformerConfig", "check_tokenizer_matches", "position_limit", "truncation_warning"]
