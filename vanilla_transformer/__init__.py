"""vanilla-transformer: the original Transformer (Vaswani et al. 2017) as a Hugging Face transformers model.

Importing the package registers the model type "vanilla_transformer" with `AutoConfig`, `AutoModel` and
`AutoModelForSeq2SeqLM`, and a "translation" pipeline with `transformers.pipelines.PIPELINE_REGISTRY`.
`load_model_folder` loads a model folder with its tokenizer, checked against each other; `export_ctranslate2` writes
a model as a CTranslate2 folder; `load_translator` translates with a model folder or such an exported one;
`import_checkpoint` brings in a trained Marian, FSMT or fairseq Transformer, exactly.

This package is the inference layer. The training stack, `vanilla_transformer.training`, is built on it and is
imported only by the command line (`vanilla_transformer.cli` and its `commands`) and by whoever trains.
"""

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM
from transformers.models.auto import tokenization_auto

from .configuration import VanillaTransformerConfig, check_tokenizer_matches
from .exports.ctranslate2 import export_ctranslate2
from .importing import CheckpointImportError, import_checkpoint
from .inference.pipeline import TranslationPipeline
from .inference.pipeline import register as register_translation_pipeline
from .inference.translators import Translation, load_translator
from .model_folder import load_model_folder
from .modeling import (
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerModel,
    VanillaTransformerPreTrainedModel,
)
from .tokenization_fairseq import FairseqTokenizer

__version__ = "0.1.0"

AutoConfig.register(VanillaTransformerConfig.model_type, VanillaTransformerConfig, exist_ok=True)
AutoModel.register(VanillaTransformerConfig, VanillaTransformerModel, exist_ok=True)
AutoModelForSeq2SeqLM.register(VanillaTransformerConfig, VanillaTransformerForConditionalGeneration, exist_ok=True)
register_translation_pipeline()
# by name, as AutoTokenizer.register records a class, without making it the default tokenizer of the model type: a
# folder whose tokenizer_config.json names FairseqTokenizer then loads it from here, not as remote code
tokenization_auto.REGISTERED_TOKENIZER_CLASSES.setdefault(FairseqTokenizer.__name__, FairseqTokenizer)

__all__ = [
    "VanillaTransformerConfig",
    "check_tokenizer_matches",
    "VanillaTransformerForConditionalGeneration",
    "VanillaTransformerModel",
    "VanillaTransformerPreTrainedModel",
    "TranslationPipeline",
    "export_ctranslate2",
    "load_model_folder",
    "import_checkpoint",
    "CheckpointImportError",
    "load_translator",
    "Translation",
    "FairseqTokenizer",
]
