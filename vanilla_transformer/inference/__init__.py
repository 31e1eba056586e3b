"""Translating with a trained model: the search options (`options`), the translators of both engines
(`translators`), the package's own beam search for terms and prefixes (`search`, `constraints`), scoring pairs
(`scoring`), word alignments (`alignment`) and the transformers pipeline (`pipeline`)."""
