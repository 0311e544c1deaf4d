"""The grader image: its content tag, its build (wheelhouse, Dockerfile, smoke test) and the docker
engine commands both the build and the docker sandbox use."""
