"""`vanilla-transformer demo`: a Gradio app that translates with a model folder and shows each stage of Figure 1.

    vanilla-transformer demo --model runs/numbers-en-de [--port 7860] [--share]

Translate: the translation, the n-best list with its scores, and the time it took. Attention: the cross-attention
alignment and any layer and head of each kind of attention. Through the layers: the embeddings, every sub-layer with
its Add&Norm, each LayerNorm's statistics, the feed-forward networks' zero units and the final softmax's top tokens,
all recorded from the model by forward hooks (`stages.trace_stages`).

Needs Gradio and matplotlib: `pip install "vanilla-transformer[demo]"`.
"""

import os
import time

from ..configuration import changed_switches, position_limit
from ..errors import MissingDependencyError, ModelFolderError
from ..inference.checks import is_blank
from ..inference.devices import DEFAULT_PLACEMENT, Placement
from ..inference.translators import PyTorchTranslator
from ..model_folder import load_model_folder
from . import figures
from .attention_maps import MAX_DRAWN_TOKENS
from .stages import Stages, trace_stages

MISSING_GRADIO = 'the demo needs Gradio and matplotlib: pip install "vanilla-transformer[demo]"'
KIND_NAMES = {
    "cross-attention": "cross",
    "encoder self-attention": "encoder_self",
    "decoder masked self-attention": "decoder_self",
}
MASKED = "decoder masked self-attention"
MEAN = "mean over heads"
EMPTY_INPUT = "Type a sentence to translate first."
MAX_NEW_TOKENS = MAX_DRAWN_TOKENS - 1  # the longest translation, in tokens: its maps, the end of sentence added
MAX_SOURCE_TOKENS = 64  # the longest sentence drawn: its maps grow as the square of its tokens
MAX_SOURCE_CHARACTERS = 1000  # read before tokenizing

INTRO = """Type a sentence and press **Translate**. The model is the paper's encoder-decoder (Figure 1): {shape}.
Every number below is the model's own, recorded by forward hooks while it reads your sentence and its translation."""
ATTENTION_CAPTION = """**Attention** (§3.2): each row is a query position and sums to 1 over the key positions.
Cross-attention (§3.2.3) takes its queries from the decoder and its keys and values from the encoder: averaged over
the heads of the last layer, it is a soft alignment between the translation and the source. In the decoder's masked
self-attention the positions to the right of the diagonal are grey: the mask sets their scores to -inf before the
softmax, so no position sees the future."""
LAYERS_CAPTION = """**Through the layers.** The input of each stack is the token embedding times sqrt(d_model) (§3.4)
plus the positional encoding (§3.5). Each sub-layer is wrapped in a residual connection and layer normalisation,
LayerNorm(x + Sublayer(x)) (§3.1): pick a sub-layer to see x, its output, the sum and the norm's output, and each
position's mean and standard deviation before and after the norm."""
FFN_CAPTION = """The position-wise feed-forward network (§3.3) widens each position to d_ff units and back: with ReLU,
max(0, x W1 + b1), the units below zero are cut to zero."""
SOFTMAX_CAPTION = """The final linear layer and softmax (§3.4) give a probability for every token at each step; the
translation takes one of them (the highest, with greedy search)."""


def import_gradio():
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # no usage reports from an offline machine
    try:
        import gradio
        import matplotlib  # noqa: F401
    except ImportError:
        raise MissingDependencyError(MISSING_GRADIO) from None
    return gradio


def model_shape(config) -> str:
    return (
        f"N = {config.encoder_layers}+{config.decoder_layers} layers, d_model {config.d_model}, h {config.num_heads}, "
        f"d_ff {config.d_ff}, {config.norm_position}-norm, {config.position_encoding} positions"
    )


class Demo:
    """What the app's events call: a translator for the n-best list and the traced stages for the pictures."""

    def __init__(self, model, tokenizer):
        self.model, self.tokenizer = model.eval(), tokenizer
        self.translator = PyTorchTranslator(model, tokenizer)

    def translate(self, source: str, num_beams: int) -> tuple[list, float]:
        """The n-best list (up to 5) of `source` as table rows, and the seconds it took."""
        num_beams = int(num_beams)
        start = time.perf_counter()
        best = self.translator.translate(
            [source],
            num_beams=num_beams,
            max_length=MAX_NEW_TOKENS,
            n_best=min(num_beams, 5),
            scores=True,
            distinct=True,
        )[0]
        seconds = time.perf_counter() - start
        return [[rank + 1, t.text, round(t.score, 4)] for rank, t in enumerate(best)], seconds

    def stages(self, source: str, translation: str) -> Stages:
        """The stages of the one forward pass over `source` and its (already found) `translation`."""
        return trace_stages(self.model, self.tokenizer, source, target=translation)

    def sublayer_choices(self, stages: Stages) -> list[tuple[str, int]]:
        return [(record.title, i) for i, record in enumerate(stages.sublayers)]

    @staticmethod
    def top_token_rows(stages: Stages) -> list[list]:
        return [
            [step + 1, produced, ", ".join(f"{token} {p:.3f}" for token, p in top)]
            for step, (produced, top) in enumerate(zip(stages.target_tokens, stages.top_tokens))
        ]


def run_translation(demo: Demo, gr, source: str, num_beams: int):
    """Everything the Translate button fills in, in the order of `outputs` in `build_app`."""
    source = (source or "").strip()
    check_source(demo, gr, source)
    rows, seconds = demo.translate(source, num_beams)
    stages = demo.stages(source, rows[0][1])
    layers = len(stages.attentions["cross"])
    timing = f"Translated in {seconds * 1000:.0f} ms (beam {int(num_beams)}, {len(rows)} best shown)."
    return (
        rows[0][1],
        rows,
        timing,
        stages,
        figures.attention_figure(stages, "cross"),
        gr.update(value=MASKED),
        gr.update(choices=list(range(1, layers + 1)), value=1),
        gr.update(value=MEAN),
        figures.attention_figure(stages, KIND_NAMES[MASKED], 1, None),
        gr.update(value="encoder"),
        figures.embedding_figure(stages, "encoder"),
        gr.update(choices=demo.sublayer_choices(stages), value=0),
        figures.sublayer_figure(stages, 0),
        figures.add_norm_figure(stages),
        figures.ffn_figure(stages),
        Demo.top_token_rows(stages),
    )


def check_source(demo: Demo, gr, source: str) -> None:
    """A `gr.Error` saying what is wrong with the sentence typed: nothing, half a character, too long to draw."""
    if is_blank(source):  # invisible characters alone too: no text to translate
        raise gr.Error(EMPTY_INPUT)
    try:
        source.encode("utf-8")
    except UnicodeEncodeError as error:
        code = f"U+{ord(source[error.start]):04X}"
        raise gr.Error(f"Character {error.start + 1} is half a character ({code}): type or paste it again.") from None
    tokens = 0 if len(source) > MAX_SOURCE_CHARACTERS else len(demo.tokenizer(source)["input_ids"])
    most = min(MAX_SOURCE_TOKENS, position_limit(demo.model.config) or MAX_SOURCE_TOKENS)  # learned positions: fewer
    if len(source) > MAX_SOURCE_CHARACTERS or tokens > most:
        has = f"{tokens} tokens" if tokens else f"{len(source)} characters"
        raise gr.Error(
            f"The demo draws sentences of at most {most} tokens and {MAX_SOURCE_CHARACTERS} characters; "
            f"this one has {has}. Translate longer texts with `vanilla-transformer translate`."
        )


def attention_view(stages: Stages | None, kind_name: str, layer, head):
    if stages is None:
        return None
    kind = KIND_NAMES[kind_name]
    layers = len(stages.attentions[kind])
    layer = min(int(layer or layers), layers)
    return figures.attention_figure(stages, kind, layer, None if head in (None, MEAN) else int(head))


def redraw(draw):
    """An event handler drawing `draw(stages, choice)`, or nothing before the first translation."""
    return lambda stages, choice: None if stages is None or choice is None else draw(stages, choice)


def check_paper_architecture(config) -> None:
    """The app shows the stages of Figure 1: a model a study took apart (`changed_switches`) is refused with a
    `ModelFolderError` naming what it changed."""
    changed = changed_switches(config)
    if changed:
        raise ModelFolderError(
            f"the model changes Figure 1 ({changed}, a study's switches); the demo shows the paper's architecture",
            exit_code=2,
        )


def build_app(model, tokenizer, title: str = "vanilla-transformer"):
    """The Gradio Blocks app for a model and its tokenizer (any folder's, `trust_remote_code` ones included); a model
    a study took apart is refused (`check_paper_architecture`)."""
    check_paper_architecture(model.config)
    gr = import_gradio()
    demo = Demo(model, tokenizer)
    config = model.config
    num_beams = max(1, int(model.generation_config.num_beams or 1))
    with gr.Blocks(title=title) as app:
        gr.Markdown(f"# {title}\n\n" + INTRO.format(shape=model_shape(config)))
        stages = gr.State(None)
        with gr.Row():
            source = gr.Textbox(label="Source sentence", elem_id="source", scale=4, max_length=MAX_SOURCE_CHARACTERS)
            beams = gr.Slider(  # up to the model's own beam, where it searches wider than 8
                1, max(8, num_beams), value=num_beams, step=1, label="Beam size", elem_id="beams", scale=1
            )
        translate = gr.Button("Translate", variant="primary", elem_id="translate")
        translation = gr.Textbox(label="Translation", elem_id="translation", interactive=False)
        nbest = gr.Dataframe(headers=["rank", "translation", "score"], label="n-best", elem_id="nbest")
        timing = gr.Markdown(elem_id="timing")
        with gr.Tab("Attention"):
            gr.Markdown(ATTENTION_CAPTION)
            with gr.Row():
                kind = gr.Dropdown(list(KIND_NAMES), value=MASKED, label="Attention")
                layer = gr.Dropdown([], label="Layer", elem_id="attention-layer")
                heads = [MEAN] + [str(h) for h in range(1, config.num_heads + 1)]
                head = gr.Dropdown(heads, value=MEAN, label="Head")
            with gr.Row():
                alignment = gr.Image(label="Alignment", elem_id="alignment", show_label=False)
                attention = gr.Image(label="Attention map", elem_id="attention", show_label=False)
        with gr.Tab("Through the layers"):
            gr.Markdown(LAYERS_CAPTION)
            stack = gr.Radio(["encoder", "decoder"], value="encoder", label="Input of the", elem_id="stack")
            embeddings = gr.Image(label="Embeddings and positions", elem_id="embeddings", show_label=False)
            sublayer = gr.Dropdown([], label="Sub-layer", elem_id="sublayer-choice")
            sublayer_image = gr.Image(label="One sub-layer with its Add&Norm", elem_id="sublayer", show_label=False)
            add_norm = gr.Image(label="Every Add&Norm", elem_id="add-norm", show_label=False)
            gr.Markdown(FFN_CAPTION)
            ffn = gr.Image(label="Feed-forward units at zero", elem_id="ffn", show_label=False)
            gr.Markdown(SOFTMAX_CAPTION)
            softmax = gr.Dataframe(headers=["step", "token produced", "top tokens (probability)"], elem_id="softmax")
        outputs = [translation, nbest, timing, stages, alignment, kind, layer, head, attention, stack, embeddings]
        outputs += [sublayer]
        outputs += [sublayer_image, add_norm, ffn, softmax]
        for event, name in ((translate.click, "translate"), (source.submit, "translate_on_enter")):
            event(lambda text, b: run_translation(demo, gr, text, b), [source, beams], outputs, api_name=name)
        for control in (kind, layer, head):
            control.change(attention_view, [stages, kind, layer, head], attention)
        stack.change(redraw(figures.embedding_figure), [stages, stack], embeddings)
        sublayer.change(redraw(lambda s, i: figures.sublayer_figure(s, int(i))), [stages, sublayer], sublayer_image)
    return app


def launch(
    folder: str,
    port: int | None = None,
    share: bool = False,
    host: str = "127.0.0.1",
    block: bool = True,
    where: str | None = None,
    placement: Placement = DEFAULT_PLACEMENT,
):
    """Load a model folder on `placement`'s device and precision and serve the app on http://host:port (Gradio's
    default port when None). A folder that does not load is a `ModelFolderError` whose message starts with `where`
    (default: the folder)."""
    import_gradio()  # before loading the model: a missing extra is reported at once
    placement.torch_dtype(placement.torch_device())  # before loading the model: a placement it cannot use is named
    model, tokenizer = load_model_folder(folder, where)
    model = placement.place(model)
    app = build_app(model, tokenizer, title=f"vanilla-transformer: {os.path.basename(os.path.normpath(folder))}")
    app.launch(server_name=host, server_port=port, share=share, prevent_thread_lock=not block)
    return app
