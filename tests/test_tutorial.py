"""docs/tutorial.md, the walk through Figure 1: executed top to bottom in a Jupyter kernel on the installed package,
and the worked numbers it prints compared with the ones the teaching texts give.

The notebook is stored as Markdown without outputs (jupytext); this test converts it, runs it with nbclient in a
fresh folder (where its training run writes its model) and reads what its cells printed.
"""

import sys
from pathlib import Path

import jupytext
import pytest
from nbclient import NotebookClient

TUTORIAL = Path(__file__).resolve().parent.parent / "docs" / "tutorial.md"

# Each line the tutorial must print, with the paper section its heading names.
WORKED_NUMBERS = {
    "§3.4": ["scale sqrt(d_model) = 8.0", "token ids (1, 4) -> embedded input (1, 4, 64)"],
    "§3.5": [
        "PE(1, 0:4) = [0.8415, 0.5403, 0.6816, 0.7318]",
        "sin(1), cos(1), sin(1/10000^(2/64)), cos(1/10000^(2/64)) = [0.8415, 0.5403, 0.6816, 0.7318]",
    ],
    "§3.2.1": ["eager_attention_forward agrees", "d_k =  64: std of q.k =   8.0, of q.k / sqrt(d_k) = 1.00"],
    "§3.2.2": [
        "multi-head attention parameters at d_model 64: 16,384 = 4 x 64 x 64",
        "MultiHeadAttention = Concat(head_1..head_h) W^O, written out",
    ],
    "§3.1": [
        "x + F(x) = 5 + 2 = 7",
        "mean 1.0 variance 5.0",
        "AddNorm(x, zero sub-layer) = [1.34, 0.45, -0.45, -1.34]",
        "nn.LayerNorm(4)(x)         = [1.34, 0.45, -0.45, -1.34]",
        "LayerNorm parameters (gamma and beta) at d_model 64: 128",
        "first position, LayerNorm: tensor([ 1.34,  0.45, -0.45, -1.34]) -> tensor([ 1.34,  0.45, -0.45, -1.34])",
        "equals the encoder's first layer output",
        "encoder layer parameters at d_model 64: 49,728 = 16,384 + 128 + 33,088 + 128",
    ],
    "§3.3": [
        "W_1: 64 -> 256 (4 x d_model), W_2: 256 -> 64",
        "feed-forward parameters at d_model 64: 33,088 = 64 x 256 + 256 + 256 x 64 + 64",
        "at the paper's d_model 512, d_ff 2048: 2,099,712",
    ],
    "§3.2.3": [
        "masked self-attention, Add & Norm -> cross-attention, Add & Norm -> feed-forward, Add & Norm: (1, 5, 64)",
        "linear -> logits         (1, 5, 100)  (vocabulary 100)",
        "softmax: each row sums to 1.0",
    ],
    "pre-norm": [
        "post-norm: LayerNorm(x + F(x)); pre-norm: x + F(LayerNorm(x))",
        "post-norm: [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]",
        "the pre-norm toy model has 256 more parameters",
    ],
}


def printed(notebook) -> str:
    """Everything the cells wrote to stdout or returned as text."""
    parts = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.output_type == "stream" and output.name == "stdout":
                parts.append(output.text)
            elif output.output_type in ("execute_result", "display_data") and "text/plain" in output.data:
                parts.append(output.data["text/plain"])
    return "".join(parts)


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """The tutorial run by the kernel named in its header (python3: ipykernel's, on this interpreter), in a fresh
    folder; a cell that raises fails here with the cell and its traceback. A last cell, not in the file, records the
    kernel's interpreter."""
    notebook = jupytext.read(TUTORIAL)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(not cell.get("outputs") for cell in code)
    assert not [cell.source for cell in code if cell.source.startswith("%%")], "a shell block became a cell"
    notebook.cells.append(jupytext.reads("```python\nimport sys\nprint(sys.executable)\n```", fmt="md").cells[0])
    folder = tmp_path_factory.mktemp("tutorial")
    client = NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(folder)}})
    client.execute()
    return notebook, folder


def test_the_tutorial_runs_on_this_interpreter_and_trains_in_its_folder(executed):
    notebook, folder = executed
    assert notebook.cells[-1].outputs[0].text.strip() == sys.executable
    trained = folder / "runs" / "tutorial-numbers"
    assert (trained / "model.safetensors").is_file()
    assert f"vanilla-transformer demo --model {trained}\n" in printed(notebook)


@pytest.mark.parametrize("section", WORKED_NUMBERS)
def test_the_tutorial_prints_the_worked_numbers_of_each_section(executed, section):
    notebook, _ = executed
    text = printed(notebook)
    assert section in TUTORIAL.read_text(encoding="utf-8")
    missing = [line for line in WORKED_NUMBERS[section] if line not in text]
    assert not missing, f"not printed by docs/tutorial.md: {missing}"


def test_the_tutorial_translates_and_draws_the_alignment(executed):
    notebook, _ = executed
    text = printed(notebook)
    assert "forty-two -> " in text
    assert "forty-two thousand six hundred nineteen -> " in text
    images = [o for cell in notebook.cells for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(images) == 2  # the sinusoids and the alignment
