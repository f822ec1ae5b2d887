# The two commands of the README. Everything else lives in scripts/.
.PHONY: demo test

# Builds gearbox (release) and runs the main job.
demo:
	scripts/setup.sh
	cargo build --release --locked -p gearbox-cli
	target/release/gearbox demo

# Runs every test (formatting, lints, Rust and Python tests, interop with real peers).
test:
	scripts/test.sh
