"""`vanilla-transformer serve`: a translation server that speaks LibreTranslate's API and batches the sentences of
concurrent requests together.

- `documents`: texts into sentences and back, with their paragraph breaks and spacing;
- `batcher`: the bounded queue of sentences and the worker thread that translates them in batches;
- `access`: API keys and their requests-per-minute limits;
- `metrics`: the Prometheus metrics of `/metrics`;
- `engine`: the model behind the server, loaded and warmed up;
- `app`: the ASGI app (FastAPI), its endpoints and their errors."""
