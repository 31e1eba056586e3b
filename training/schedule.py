"""The learning-rate schedule of §5.3: linear warm-up, then decay with the inverse square root of the step."""


def inverse_sqrt_lr(step: int, d_model: int, warmup_steps: int, peak_lr: float | None = None) -> float:
    """lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)   (equation 3)

    With `peak_lr`, the curve is rescaled so that its maximum (reached at step = warmup_steps) equals peak_lr.
    Step 0 is treated as step 1 so that the first update is not skipped.
    """
    step = max(step, 1)
    lr = d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)
    if peak_lr is not None:
        lr *= peak_lr / (d_model**-0.5 * warmup_steps**-0.5)
    return lr


def lr_lambda(d_model: int, warmup_steps: int, peak_lr: float | None = None):
    """A `LambdaLR` multiplier for an optimizer created with lr=1.0."""
    return lambda step: inverse_sqrt_lr(step + 1, d_model, warmup_steps, peak_lr)
