from .configuration_vanilla_transformer import (
    STUDY_SWITCHES,
    SWITCHES,
    StudySwitch,
    VanillaTransformerConfig,
    changed_switches,
    check_tokenizer_matches,
    position_limit,
    target_vocabulary_size,
)

__all__ = [
    "STUDY_SWITCHES",
    "SWITCHES",
    "StudySwitch",
    "VanillaTransformerConfig",
    "changed_switches",
    "check_tokenizer_matches",
    "position_limit",
    "target_vocabulary_size",
]
