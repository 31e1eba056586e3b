"""The models the suites measure: the sizes and batches, this package's model and MarianMTModel built at identical
dimensions, and a fixed-length `generate()` call.

Only the standard library is imported here at import time: the serving suite's CTranslate2 probe processes import
this module and must not load torch or transformers.
"""

# model shapes: the embedded number task, Transformer-Tiny for Multi30k, and the paper's base model
SIZES = {
    "numbers": dict(d_model=128, heads=4, d_ff=512, layers=2, vocab=400),
    "tiny": dict(d_model=128, heads=4, d_ff=256, layers=4, vocab=8000),
    "base": dict(d_model=512, heads=8, d_ff=2048, layers=6, vocab=37000),
}
# training batch (sentences, source length, target length) per size, and in --quick mode
BATCHES = {"numbers": (256, 12, 12), "tiny": (256, 16, 16), "base": (64, 32, 32)}
QUICK_BATCHES = {"numbers": (128, 12, 12), "tiny": (128, 16, 16), "base": (16, 32, 32)}
PAD, BOS, EOS = 0, 1, 2


def build(kind: str, size: dict, attn: str, device: str, dropout: float = 0.1, **config):
    """The same Transformer as this package's model or as MarianMTModel (post-norm, sinusoidal, shared embeddings);
    `config`: fields of our model's configuration to change (ours only)."""
    # both models' modules are imported whichever is built, so that the two models' memory probes load the same code
    import torch
    from transformers import AutoModelForSeq2SeqLM, MarianConfig

    from vanilla_transformer import VanillaTransformerConfig

    if kind == "vanilla":
        settings = VanillaTransformerConfig(**vanilla_settings(size, dropout), **config)
    else:
        settings = MarianConfig(**marian_settings(size, dropout))
    torch.manual_seed(0)
    return AutoModelForSeq2SeqLM.from_config(settings, attn_implementation=attn).to(device)


def vanilla_settings(size: dict, dropout: float) -> dict:
    return dict(
        vocab_size=size["vocab"],
        d_model=size["d_model"],
        num_heads=size["heads"],
        d_ff=size["d_ff"],
        encoder_layers=size["layers"],
        decoder_layers=size["layers"],
        dropout=dropout,
        max_position_embeddings=512,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        decoder_start_token_id=BOS,
    )


def marian_settings(size: dict, dropout: float) -> dict:
    return dict(
        vocab_size=size["vocab"],
        d_model=size["d_model"],
        encoder_attention_heads=size["heads"],
        decoder_attention_heads=size["heads"],
        encoder_ffn_dim=size["d_ff"],
        decoder_ffn_dim=size["d_ff"],
        encoder_layers=size["layers"],
        decoder_layers=size["layers"],
        dropout=dropout,
        attention_dropout=0.0,
        activation_dropout=0.0,
        activation_function="relu",
        scale_embedding=True,
        max_position_embeddings=512,
        pad_token_id=PAD,
        eos_token_id=EOS,
        forced_eos_token_id=None,
        decoder_start_token_id=PAD,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
    )


class Generate:
    """`generate` for a fixed number of new tokens (min = max), so both models decode exactly as many steps.

    `compiled`: the library's compiled decoding, a static cache with each decoding step run through torch.compile
    (generate() does this by itself on accelerators; on the CPU the compile config has to ask for it)."""

    def __init__(self, model, sources, num_beams: int, new_tokens: int, compiled: bool = False):
        self.model, self.sources = model.eval(), sources
        self.kwargs = dict(
            num_beams=num_beams,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            early_stopping=False if num_beams > 1 else None,
        )
        if compiled:
            from transformers import CompileConfig

            compile_config = CompileConfig()
            compile_config._compile_all_devices = True
            self.kwargs.update(cache_implementation="static", compile_config=compile_config)
        self.kwargs = {k: v for k, v in self.kwargs.items() if v is not None}

    def __call__(self):
        import torch

        with torch.no_grad():
            attention_mask = torch.ones_like(self.sources)
            return self.model.generate(input_ids=self.sources, attention_mask=attention_mask, **self.kwargs)
