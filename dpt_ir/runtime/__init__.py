"""The runtime: `Program`, `TapePass`, execution plans and their workspaces, recorded
launches, loops and loop programs, and the generated-module cache."""
