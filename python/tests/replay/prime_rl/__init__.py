"""Replay of prime-rl's orchestrator algorithm contract (see tests/replay/README.md): not prime-rl."""
