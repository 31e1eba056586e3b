"""The tokenizer of an imported fairseq or FSMT model: Moses tokenisation and subword-nmt BPE, as fairseq's pipeline
prepares text, with the source and the target side each in its own language and dictionary.

transformers' `FSMTTokenizer` encodes every text as a source sentence: the source language's Moses rules and the
source dictionary, `text_target` included. Where the two dictionaries differ, the ids of a target sentence are then
source ids, and a model fine-tuned on them learns wrong labels. `FairseqTokenizer` encodes `text_target` as fairseq
prepares a target sentence: the target language's Moses rules (German keeps the period of "13." at the end of a
sentence, English splits it off) and the target dictionary. Decoding reads the target dictionary, as FSMTTokenizer's
does.

This file imports nothing from the vanilla-transformer package: a model folder carries a copy of it, named in
tokenizer_config.json's `auto_map`, so that the folder's tokenizer also loads without the package
(`trust_remote_code=True`).
"""

from transformers import FSMTTokenizer


class FairseqTokenizer(FSMTTokenizer):
    """`FSMTTokenizer` with a target side: in target mode (`text_target=`), the target language's Moses rules and
    the target dictionary."""

    _auto_class = "AutoTokenizer"  # save_pretrained writes this file and an auto_map beside the vocabularies

    def _switch_to_target_mode(self):
        self._target_side = True

    def _switch_to_input_mode(self):
        self._target_side = False

    @property
    def target_side(self) -> bool:
        return getattr(self, "_target_side", False)

    # FSMTTokenizer's tokenisation runs Moses in the source language whatever it encodes: here, in the target's when
    # it encodes a target
    def moses_pipeline(self, text, lang):
        return super().moses_pipeline(text, lang=self.tgt_lang if self.target_side else lang)

    def moses_tokenize(self, text, lang):
        return super().moses_tokenize(text, lang=self.tgt_lang if self.target_side else lang)

    def _convert_token_to_id(self, token):
        """The token's id in the dictionary of the side being encoded; <unk>'s where it has none."""
        if not self.target_side:
            return super()._convert_token_to_id(token)
        if not hasattr(self, "_target_encoder"):
            self._target_encoder = {symbol: index for index, symbol in self.decoder.items()}
        return self._target_encoder.get(token, self._target_encoder.get(self.unk_token))

    @classmethod
    def from_fsmt(cls, tokenizer: FSMTTokenizer) -> "FairseqTokenizer":
        """The same tokenizer (languages, dictionaries, BPE codes, lowercasing, special tokens, the longest input it
        truncates to) with its target side."""
        return cls(
            langs=[tokenizer.src_lang, tokenizer.tgt_lang],
            src_vocab_file=tokenizer.src_vocab_file,
            tgt_vocab_file=tokenizer.tgt_vocab_file,
            merges_file=tokenizer.merges_file,
            do_lower_case=tokenizer.do_lower_case,
            unk_token=tokenizer.unk_token,
            bos_token=tokenizer.bos_token,
            sep_token=tokenizer.sep_token,
            pad_token=tokenizer.pad_token,
            model_max_length=tokenizer.model_max_length,
        )
