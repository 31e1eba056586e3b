"""vanilla-transformer: the original Transformer (Vaswani et al. 2017) as a Hugging Face transformers model.

Importing the package registers the model type "vanilla_transformer" with `AutoConfig`, `AutoModel` and
`AutoModelForSeq2SeqLM`, and a "translation" pipeline with `transformers.pipelines.PIPELINE_REGISTRY`.
`export_ctranslate2` writes a model as a CTranslate2 folder; `load_translator` translates with a model folder or
such an exported one.
"""

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

from .configuration import VanillaTransformerConfig, check_tokenizer_matches
from .ctranslate2_export import export_ctranslate2
from .modeling import (
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerModel,
    VanillaTransformerPreTrainedModel,
)
from .pipeline import TranslationPipeline
from .pipeline import register as register_translation_pipeline
from .translators import Translation, load_translator

__version__ = "0.1.0"

AutoConfig.register(VanillaTransformerConfig.model_type, VanillaTransformerConfig, exist_ok=True)
AutoModel.register(VanillaTransformerConfig, VanillaTransformerModel, exist_ok=True)
AutoModelForSeq2SeqLM.register(VanillaTransformerConfig, VanillaTransformerForConditionalGeneration, exist_ok=True)
register_translation_pipeline()

__all__ = [
    "VanillaTransformerConfig",
    "check_tokenizer_matches",
    "VanillaTransformerForConditionalGeneration",
    "VanillaTransformerModel",
    "VanillaTransformerPreTrainedModel",
    "TranslationPipeline",
    "export_ctranslate2",
    "load_translator",
    "Translation",
]
