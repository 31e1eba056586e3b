"""The learning-rate schedule of §5.3: linear warm-up, then decay with the inverse square root of the step; and an
optional linear cool-down to zero over the last updates of a run whose length is known."""


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


def cooldown_factor(step: int, total_steps: int, cooldown_steps: int) -> float:
    """1 until the last `cooldown_steps` updates, then falling linearly: 1/cooldown_steps at update `total_steps`.

    Steps count from 1. A run cut short by a budget ends on a learning rate near zero instead of wherever the inverse
    square root has reached, which anneals the final weights (0 disables the cool-down).
    """
    if cooldown_steps <= 0:
        return 1.0
    return max(0.0, min(1.0, (total_steps - step + 1) / cooldown_steps))


def lr_lambda(
    d_model: int, warmup_steps: int, peak_lr: float | None = None, total_steps: int = 0, cooldown_steps: int = 0
):
    """A `LambdaLR` multiplier for an optimizer created with lr=1.0 (LambdaLR counts from 0, the schedule from 1)."""
    return lambda step: (
        inverse_sqrt_lr(step + 1, d_model, warmup_steps, peak_lr)
        * cooldown_factor(step + 1, total_steps, cooldown_steps)
    )
