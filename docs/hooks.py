"""The mkdocs hook that lets the manual link to the repository's other files (BENCHMARKS.md, RESULTS.md, the README,
bench/README.md) as the pages do on a code host, with relative links such as `../BENCHMARKS.md`: each such target must
exist (else the build stops, naming the page and the link), and is copied into the site under `repository/` as it is,
not rendered, so that the site's links resolve and mkdocs' strict link check passes."""

import os
import re

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

LINK = re.compile(r"\]\(([^)\s]+)\)")  # a Markdown link's target
FOLDER = "repository"


def outside_targets(page_path: str, markdown: str, docs_dir: str) -> list[tuple[str, str]]:
    """(link, target's path from the repository root) of each relative link in `markdown` that leaves docs/."""
    root, found = os.path.dirname(docs_dir), []
    for link in LINK.findall(markdown):
        path = link.split("#")[0]
        if not path or "://" in path or path.startswith(("/", "mailto:")):
            continue
        target = os.path.normpath(os.path.join(docs_dir, os.path.dirname(page_path), path))
        if os.path.relpath(target, docs_dir).startswith(".."):
            found.append((link, os.path.relpath(target, root)))
    return found


def on_files(files, config):
    docs_dir, root = config["docs_dir"], os.path.dirname(config["docs_dir"])
    added = set()
    for page in [file for file in files if file.is_documentation_page()]:
        with open(page.abs_src_path, encoding="utf-8") as handle:
            markdown = handle.read()
        for link, target in outside_targets(page.src_uri, markdown, docs_dir):
            if not os.path.isfile(os.path.join(root, target)):
                raise PluginError(f"docs/{page.src_uri} links to {link}, which is not a file of the repository")
            if target not in added:
                added.add(target)
                files.append(repository_file(target, root, config))
    return files


def repository_file(target: str, root: str, config) -> File:
    """The repository's file `target`, copied to repository/TARGET as it is (a Markdown file is not made a page)."""
    file = File(f"{FOLDER}/{target}", None, config["site_dir"], config["use_directory_urls"])
    file.abs_src_path = os.path.join(root, target)
    file.is_documentation_page = lambda: False
    return file


def on_page_markdown(markdown, page, config, files):
    """Each link that leaves docs/ points at the copy under repository/ instead."""
    depth = page.file.src_uri.count("/")
    for link, target in outside_targets(page.file.src_uri, markdown, config["docs_dir"]):
        fragment = link[len(link.split("#")[0]) :]
        markdown = markdown.replace(f"]({link})", f"]({'../' * depth}{FOLDER}/{target}{fragment})")
    return markdown
