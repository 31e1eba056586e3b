"""A "translation" pipeline for transformers 5, which no longer ships one.

Importing `vanilla_transformer` registers it with `transformers.pipelines.PIPELINE_REGISTRY`, so that

    translate = pipeline("translation", model="path/to/folder")
    translate(["forty-two", "seven"], num_beams=5, batch_size=8)

returns `[{"translation_text": ...}, ...]`, one dict per input (a single dict in a list for a single string, as the
transformers 4 pipeline did). Keyword arguments other than `max_source_length` and the pipeline's own (`batch_size`,
...) are passed to `model.generate`. It works with any `AutoModelForSeq2SeqLM` model, not only this one.
"""

import transformers.pipelines
from transformers import AutoModelForSeq2SeqLM, Pipeline
from transformers.pipelines import PIPELINE_REGISTRY
from transformers.utils import logging

from ..configuration import check_tokenizer_matches, position_limit
from ..errors import is_whole
from ..model_folder import encode_within

logger = logging.get_logger(__name__)


class TranslationPipeline(Pipeline):
    _pipeline_calls_generate = True
    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    _load_tokenizer = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        check_tokenizer_matches(self.model.config, self.tokenizer, "translation pipeline")

    def _sanitize_parameters(self, max_source_length: int | None = None, **generate_kwargs):
        if max_source_length is not None and (not is_whole(max_source_length) or max_source_length < 1):
            raise ValueError(
                f"translation pipeline: max_source_length must be a positive integer, got {max_source_length!r}"
            )
        preprocess_params = {} if max_source_length is None else {"max_source_length": max_source_length}
        return preprocess_params, generate_kwargs, {}

    def __call__(self, inputs: str | list[str], **kwargs):
        """One list of translations per input (a list of strings gives one translation each, unlisted, where one is
        asked for). A blank input (empty, or spaces only) is answered with empty translations without a search, as
        the package's translators answer it: a search from an empty source writes whatever the model likes best."""
        if not (isinstance(inputs, str) or (isinstance(inputs, list) and all(isinstance(x, str) for x in inputs))):
            raise ValueError(
                f"translation pipeline: expected a string or a list of strings, got {type(inputs).__name__}"
            )
        _, generate_kwargs, _ = self._sanitize_parameters(**kwargs)  # checked even when every input is blank
        texts = [inputs] if isinstance(inputs, str) else inputs
        others = [text for text in texts if text.strip()]
        found = iter(super().__call__(others, **kwargs) if others else [])
        returned = generate_kwargs.get("num_return_sequences") or self.model.generation_config.num_return_sequences or 1
        results = [next(found) if text.strip() else [{"translation_text": ""}] * returned for text in texts]
        if isinstance(inputs, str):
            return results[0]
        if all(len(result) == 1 for result in results):
            return [result[0] for result in results]
        return results

    def preprocess(self, text: str, max_source_length: int | None = None):
        """The tokenised source, cut to `max_source_length` tokens if given, and to the model's learned positions
        (`position_limit`) with a warning naming the sentence: the model could not read more."""
        limit = position_limit(self.model.config)
        if limit is not None and (max_source_length is None or max_source_length > limit):
            ids = encode_within(
                self.tokenizer, [text], limit, "translation pipeline", warn=lambda _, line: logger.warning(line)
            )
            return self.tokenizer.pad({"input_ids": ids}, return_tensors="pt")
        return self.tokenizer(
            text, return_tensors="pt", truncation=max_source_length is not None, max_length=max_source_length
        )

    def _forward(self, model_inputs, **generate_kwargs):  # the model's generation_config under generate_kwargs
        batch_size = model_inputs["input_ids"].shape[0]
        output_ids = self.model.generate(**model_inputs, **generate_kwargs)
        return {"output_ids": output_ids.reshape(batch_size, -1, output_ids.shape[-1])}  # (batch, returned, len)

    def postprocess(self, model_outputs):
        return [
            {"translation_text": self.tokenizer.decode(ids, skip_special_tokens=True)}
            for ids in model_outputs["output_ids"][0]
        ]


def register() -> None:
    """Register the task "translation". transformers 5 lists the name among its removed tasks and refuses it before
    looking in the registry, so the name is taken off that list first: the task exists again, implemented here."""
    getattr(transformers.pipelines, "REMOVED_TASKS", {}).pop("translation", None)
    if "translation" not in PIPELINE_REGISTRY.supported_tasks:
        PIPELINE_REGISTRY.register_pipeline(
            "translation", pipeline_class=TranslationPipeline, pt_model=AutoModelForSeq2SeqLM, type="text"
        )
