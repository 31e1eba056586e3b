"""Writing a model for elsewhere: a CTranslate2 folder (`ctranslate2`) and a Hugging Face Space (`space`)."""
