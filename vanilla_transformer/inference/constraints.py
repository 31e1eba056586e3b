"""Where a hypothesis stands in its sentence's constraints: the terms (each one or several target tokens) that must
appear in the output. fairseq's two representations, ported from its `token_generation_constraints.py` (MIT
licence) with the same rules, so that the search that reads them (`search`) makes fairseq's choices:

- `OrderedState`: the terms in the order given, any tokens between them (`--constraints ordered`). The state is the
  position reached in the terms' tokens laid end to end; a token that breaks a term part-way starts it again.
- `UnorderedState`: the terms in any order (`--constraints unordered`), walked in a trie of their tokens. A token
  that leaves the trie part-way through a term goes back to its root, and a term that was a prefix of the path is
  then counted as met.

A state's `bank` is how many constraint tokens its hypothesis has met (Post & Vilar 2018's dynamic beam allocation
shares the beam among banks); `finished` says every term is met; `advance(token)` gives the state after one more
token, leaving this one as it was.
"""

from collections import Counter


class OrderedState:
    """Progress through the terms in order: `state` is the last matched position in their concatenated tokens."""

    def __init__(self, tokens: list[int], ends: list[bool], state: int = -1):
        self.tokens, self.ends, self.state = tokens, ends, state

    @classmethod
    def create(cls, terms: list[list[int]]) -> "OrderedState":
        tokens = [token for term in terms for token in term]
        ends = [index == len(term) - 1 for term in terms for index in range(len(term))]
        return cls(tokens, ends)

    @property
    def bank(self) -> int:
        return self.state + 1

    @property
    def finished(self) -> bool:
        return self.state + 1 == len(self.tokens)

    @property
    def distinct_tokens(self) -> int:
        return len(set(self.tokens))

    def next_tokens(self) -> set[int]:
        """The tokens that move this state on: the next term token, and the first one (starting again)."""
        tokens = {self.tokens[0]} if self.state > 0 else set()
        if not self.finished:
            tokens.add(self.tokens[self.state + 1])
        return tokens

    def advance(self, token: int) -> "OrderedState":
        token = int(token)
        if self.finished or (self.tokens[self.state + 1] != token and self.ends[self.state]):
            return OrderedState(self.tokens, self.ends, self.state)  # done, or between terms: stay
        if self.tokens[self.state + 1] == token:
            return OrderedState(self.tokens, self.ends, self.state + 1)
        return OrderedState(self.tokens, self.ends, 0 if token == self.tokens[0] else -1)  # a term broken part-way


class TrieNode:
    """A node of the terms' trie: `terminal` terms end here, `count` terms pass through or end here."""

    def __init__(self, token: int | None = None, parent: "TrieNode | None" = None):
        self.token, self.parent = token, parent
        self.terminal = self.count = 0
        self.children: dict[int, TrieNode] = {}

    def add(self, term: list[int]) -> None:
        node = self
        for token in term:
            node = node.children.setdefault(int(token), TrieNode(int(token), node))
        node.terminal += 1
        while node is not None:
            node.count += 1
            node = node.parent

    def token_counts(self) -> Counter:
        counts, stack = Counter(), list(self.children.values())
        while stack:
            node = stack.pop()
            counts[node.token] += node.count
            stack += node.children.values()
        return counts


class UnorderedState:
    """Progress through the terms in any order: the trie node reached, the nodes generated on the way (`generated`)
    and the terms met (`completed`), both counted per node."""

    def __init__(self, node: TrieNode, root: TrieNode, completed: Counter, generated: Counter):
        self.node, self.root = node, root
        self.completed, self.generated = Counter(completed), Counter(generated)
        if node is not root:
            self.generated[node] += 1

    @classmethod
    def create(cls, terms: list[list[int]]) -> "UnorderedState":
        root = TrieNode()
        for term in terms:
            root.add(term)
        return cls(root, root, Counter(), Counter())

    def moved_to(self, node: TrieNode) -> "UnorderedState":
        return UnorderedState(node, self.root, self.completed, self.generated)

    @property
    def bank(self) -> int:
        return sum(self.generated.values())

    @property
    def finished(self) -> bool:
        in_final = bool(self.node.terminal) and self.completed[self.node] < self.node.terminal
        return self.root.count - (sum(self.completed.values()) + in_final) == 0

    @property
    def distinct_tokens(self) -> int:
        return len(self.root.token_counts())

    def next_tokens(self) -> set[int]:
        """The tokens that start a term, and those that go on with the one under way."""
        tokens = set(self.root.children)
        return tokens | set(self.node.children) if self.node is not self.root else tokens

    def advance(self, token: int) -> "UnorderedState":
        token = int(token)
        child = self.node.children.get(token)
        if child is not None and self.generated[child] < child.count:
            return self.moved_to(child)
        start = self.root.children.get(token)
        restart = start is not None and self.generated[start] < start.count
        following = self.moved_to(start if restart else self.root)
        self.rewind_into(following)
        return following

    def rewind_into(self, following: "UnorderedState") -> None:
        """Leaving the trie part-way: the deepest term met on the path is counted as completed, and the nodes
        generated below it are given back."""
        node = self.node
        while node is not self.root:
            if node.terminal and self.completed[node] < node.terminal:
                following.completed[node] += 1
                return
            following.generated[node] -= 1
            node = node.parent


def initial_state(terms: list[list[int]], ordered: bool):
    """A sentence's state before its first token."""
    return (OrderedState if ordered else UnorderedState).create(terms)
