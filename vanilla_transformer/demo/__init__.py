"""Explaining a model: the browser demo (`app`), its figures (`figures`), a translation traced through the paper's
stages (`stages`) and the attention maps (`attention_maps`)."""
