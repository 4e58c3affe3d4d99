# One task runner for people and CI (.ci/run runs the README's test command).
.PHONY: install test lint format bench
install:
	pip install -e ".[test]"
test:
	python -m pytest
lint:
	ruff check . && ruff format --check .
format:
	ruff format . && ruff check --fix .
bench:
	python -m bench --quick
