"""A "translation" pipeline for transformers 5, which no longer ships one.

Importing `vanilla_transformer` registers it with `transformers.pipelines.PIPELINE_REGISTRY`, so that

    translate = pipeline("translation", model="path/to/folder")
    translate(["forty-two", "seven"], num_beams=5, batch_size=8)

returns `[{"translation_text": ...}, ...]`, one dict per input (a single dict in a list for a single string, as the
transformers 4 pipeline did). A sequence of strings (a list, a tuple, a datasets `Column`) gives a list; an iterator
or a torch `Dataset` (`KeyDataset(dataset, "text")`) gives an iterator over the results, read `STREAM_CHUNK` inputs
at a time. The transformers 4 pipeline's own arguments are taken: `truncation` (True: cut to the tokenizer's
`model_max_length`), `clean_up_tokenization_spaces`, `return_tensors` (`translation_token_ids`) and `return_text`;
so is `max_source_length`. Other keyword arguments than these and the pipeline's own (`batch_size`, ...) are passed
to `model.generate`, those of the call over those given when the pipeline was made. It works with any
`AutoModelForSeq2SeqLM` model, not only this one.
"""

import copy
import itertools
from collections.abc import Iterable, Sequence

import torch.utils.data
import transformers.pipelines
from transformers import AutoModelForSeq2SeqLM, Pipeline
from transformers.pipelines import PIPELINE_REGISTRY
from transformers.utils import logging

from ..configuration import check_tokenizer_matches, position_limit
from ..errors import HeldLog, is_whole
from ..model_folder import encode_within
from .checks import is_blank, not_unicode

logger = logging.get_logger(__name__)
STREAM_CHUNK = 256  # texts read at a time from an iterator: batches are made within them


class TranslationPipeline(Pipeline):
    _pipeline_calls_generate = True
    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    _load_tokenizer = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        check_tokenizer_matches(self.model.config, self.tokenizer, "translation pipeline")

    def _sanitize_parameters(
        self,
        max_source_length: int | None = None,
        truncation: bool | None = None,
        clean_up_tokenization_spaces: bool | None = None,
        return_tensors: bool | None = None,
        return_text: bool | None = None,
        **generate_kwargs,
    ):
        if max_source_length is not None and (not is_whole(max_source_length) or max_source_length < 1):
            raise ValueError(
                f"translation pipeline: max_source_length must be a positive integer, got {max_source_length!r}"
            )
        if truncation and max_source_length is None:  # transformers 4's: cut to what the tokenizer says it takes
            max_source_length = min(self.tokenizer.model_max_length, 10**9)
        check_generation(self.model.generation_config, self.generate_settings(generate_kwargs))
        preprocess_params = {} if max_source_length is None else {"max_source_length": max_source_length}
        given = dict(clean_up_tokenization_spaces=clean_up_tokenization_spaces, return_tensors=return_tensors,
                     return_text=return_text)  # fmt: skip
        postprocess_params = {key: value for key, value in given.items() if value is not None}  # over the pipeline's
        return preprocess_params, generate_kwargs, postprocess_params

    def __call__(self, inputs: str | Sequence[str] | Iterable[str], **kwargs):
        """One list of translations per input (a sequence of strings gives one translation each, unlisted, where one
        is asked for; an iterator or a torch Dataset, an iterator over them). A blank input (empty, or spaces only)
        is answered with empty translations without a search, as the package's translators answer it: a search from
        an empty source writes whatever the model likes best."""
        if isinstance(inputs, str):
            return self.translate_texts([inputs], kwargs)[0]
        if isinstance(inputs, (bytes, bytearray)):  # a sequence, of ints
            raise ValueError(f"translation pipeline: the input is {type(inputs).__name__}, not a string: decode it")
        if isinstance(inputs, torch.utils.data.Dataset) and not isinstance(inputs, torch.utils.data.IterableDataset):
            inputs = map(inputs.__getitem__, range(len(inputs)))  # read by index, as a DataLoader would
        elif isinstance(inputs, Sequence):
            results = self.translate_texts(list(inputs), kwargs)
            return [result[0] for result in results] if all(len(result) == 1 for result in results) else results
        if isinstance(inputs, Iterable):
            self._sanitize_parameters(**kwargs)  # checked at the call, not at the first result
            return self.stream(iter(inputs), kwargs)
        raise ValueError(
            f"translation pipeline: expected a string or a sequence or iterator of strings, got {type(inputs).__name__}"
        )

    def stream(self, inputs, kwargs: dict):
        """The results of an iterator of texts, `STREAM_CHUNK` texts translated at a time: each a list of dicts, as
        transformers 4 gave them."""
        for start in itertools.count(0, STREAM_CHUNK):
            if not (chunk := list(itertools.islice(inputs, STREAM_CHUNK))):
                return
            yield from self.translate_texts(chunk, kwargs, start)

    def translate_texts(self, texts: list, kwargs: dict, start: int = 0) -> list[list[dict]]:
        """The list of translations of each text, each checked to be a string (`start`: the inputs before them)."""
        for index, text in enumerate(texts, start + 1):
            if not isinstance(text, str):
                raise ValueError(f"translation pipeline: input {index} is {type(text).__name__}, not a string")
            if problem := not_unicode(text):
                raise ValueError(f"translation pipeline: input {index}: {problem}")
        _, generate_kwargs, postprocess_params = self._sanitize_parameters(**kwargs)  # even when all are blank
        others = [text for text in texts if not is_blank(text)]
        found = iter(super().__call__(others, **kwargs) if others else [])
        returned = generate_kwargs.get("num_return_sequences") or self.model.generation_config.num_return_sequences or 1
        postprocess_params = {**self._postprocess_params, **postprocess_params}  # the call's over the pipeline's

        def blank() -> list[dict]:  # a new one each time: a caller may change what it is given
            nothing = torch.empty(0, dtype=torch.long)
            return self.postprocess({"output_ids": [[nothing] * returned]}, **postprocess_params)

        return [blank() if is_blank(text) else next(found) for text in texts]

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

    def generate_settings(self, settings: dict) -> dict:
        """The generate() settings of a call: its own, over those given when the pipeline was made (transformers
        5.24 keeps those apart, for `_prepare_generate_kwargs`; earlier releases in the pipeline's
        `generation_config`), over the model's generation config."""
        if hasattr(self, "_prepare_generate_kwargs"):
            return self._prepare_generate_kwargs(settings)
        if "generation_config" in settings or getattr(self, "generation_config", None) is None:
            return settings
        return {**settings, "generation_config": self.generation_config}

    def _forward(self, model_inputs, **generate_kwargs):
        batch_size = model_inputs["input_ids"].shape[0]
        output_ids = self.model.generate(**model_inputs, **self.generate_settings(generate_kwargs))
        return {"output_ids": output_ids.reshape(batch_size, -1, output_ids.shape[-1])}  # (batch, returned, len)

    def postprocess(self, model_outputs, clean_up_tokenization_spaces=None, return_tensors=False, return_text=True):
        """Each returned sequence as a dict: its text (`translation_text`), its token ids (`translation_token_ids`)
        with `return_tensors`, or both."""
        results = []
        for ids in model_outputs["output_ids"][0]:
            result = {"translation_token_ids": ids} if return_tensors else {}
            if return_text:
                decoded = self.tokenizer.decode(
                    ids, skip_special_tokens=True, clean_up_tokenization_spaces=clean_up_tokenization_spaces
                )
                result["translation_text"] = decoded
            results.append(result)
        return results


def check_generation(generation_config, settings: dict) -> None:
    """A ValueError where generate() would refuse the generation `settings` over `generation_config` (or fail on
    them: num_beams 0), raised at the call whatever the inputs are: all blank, or an iterator not read yet. What
    generate() only warns of is left to it (its warnings here are dropped: it gives them again)."""
    if settings.get("return_dict_in_generate"):
        raise ValueError("translation pipeline: return_dict_in_generate: the pipeline returns texts (and token ids "
                         "with return_tensors); call model.generate() for scores")  # fmt: skip
    settings = dict(settings)
    config = copy.deepcopy(settings.pop("generation_config", None) or generation_config)  # the call's, if it gives one
    with HeldLog("transformers.generation.configuration_utils"):
        try:
            config.update(**settings)  # which validates the settings
            config.validate()
        except ValueError as error:
            raise ValueError(f"translation pipeline: {error}") from None
    if not is_whole(config.num_beams) or config.num_beams < 1:
        raise ValueError(f"translation pipeline: num_beams must be a positive integer, got {config.num_beams!r}")


def register() -> None:
    """Register the task "translation". transformers 5 lists the name among its removed tasks and refuses it before
    looking in the registry, so the name is taken off that list first: the task exists again, implemented here."""
    getattr(transformers.pipelines, "REMOVED_TASKS", {}).pop("translation", None)
    if "translation" not in PIPELINE_REGISTRY.supported_tasks:
        PIPELINE_REGISTRY.register_pipeline(
            "translation", pipeline_class=TranslationPipeline, pt_model=AutoModelForSeq2SeqLM, type="text"
        )
