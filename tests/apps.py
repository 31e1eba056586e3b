"""Serving an app in a fresh process for a test: a free local port, and waiting until the app answers."""

import contextlib
import os
import socket
import subprocess
import time
import urllib.request


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until_served(url: str, process: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the app exited with status {process.returncode}: {process.stdout.read()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"nothing served at {url} within {timeout} s")


@contextlib.contextmanager
def serving(command: list[str], cwd):
    """Run an app's command in a fresh process on a free local port (given as --port and GRADIO_SERVER_PORT) and
    yield its URL once it answers; stop the process afterwards."""
    port = free_port()
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"}
    command = [part.replace("{port}", str(port)) for part in command]
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}/"
        wait_until_served(url, process)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)
