from .configuration_vanilla_transformer import (
    FOLDED_SWITCHES,
    STUDY_SWITCHES,
    SWITCHES,
    StudySwitch,
    VanillaTransformerConfig,
    changed_switches,
    check_tokenizer_matches,
    fold_switches,
    position_limit,
    target_vocabulary_size,
)

__all__ = [
    "FOLDED_SWITCHES",
    "STUDY_SWITCHES",
    "SWITCHES",
    "StudySwitch",
    "VanillaTransformerConfig",
    "changed_switches",
    "check_tokenizer_matches",
    "fold_switches",
    "position_limit",
    "target_vocabulary_size",
]
