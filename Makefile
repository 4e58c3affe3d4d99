# One task runner for people and CI (.ci/run runs the README's test command).
.PHONY: install test fast lint format bench
install:
	pip install -e ".[test]"
test:
	python -m pytest -m "not cluster" && python -m pytest -m cluster
fast:
	python -m pytest -m "not cluster"
lint:
	ruff check . && ruff format --check .
format:
	ruff format . && ruff check --fix .
bench:
	python -m bench --quick
