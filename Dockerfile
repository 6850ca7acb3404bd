# One image for the three services; each compose service picks its command.
ARG BASE_IMAGE=python:3.12-slim
FROM ${BASE_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1

WORKDIR /app
COPY pyproject.toml README.md ./
COPY common ./common
COPY coordinator ./coordinator
COPY clients ./clients
COPY agent ./agent
COPY load_generator ./load_generator
COPY dexp ./dexp
# the JavaScript SDK the coordinator serves at /sdk/agent.js (coordinator/sdk.py): its build only
COPY sdk/js/package.json ./sdk/js/
COPY sdk/js/dist ./sdk/js/dist
ENV DEXP_SDK_DIR=/app/sdk/js
RUN pip install . \
    && useradd --create-home --uid 10001 dexp

USER dexp
EXPOSE 8000
CMD ["python", "-m", "coordinator"]
