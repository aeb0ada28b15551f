# Fraud-scoring Functions app (Python v2) for Azure Container Apps.
#
#   CPU (default):  docker build -t scoring .
#   GPU (docs/gpu.md): docker build --build-arg ORT_GPU=1 -t scoring:gpu .
#
# Base: the Azure Functions host for Python 3.11. It serves HTTP on port 80; the
# Container App's probes hit /api/health/live and /api/health/ready there.
# NOTE: 3.11, not 4-python3.13: the 3.13 worker evicts and re-imports protobuf/grpcio native modules
# at init and can crash doing so (azure-functions-python-worker#1908, #1797); this app loads both.
# Here the worker's bundled azure-functions, protobuf and grpcio come first on sys.path, whatever
# requirements.txt pins; which versions depends on the host (the tag floats): since host 4.1049
# (2026) azure-functions 1.26.0b3, protobuf 5.29 and grpcio 1.70, before it 1.22.0b4, 4.25 and 1.59.
# tests/worker/test_bundled.py runs the app on each (docs/capacity.md, "Which Python runs in
# production, and why"; docs/platform.md P37, P73).
FROM mcr.microsoft.com/azure-functions/python:4-python3.11

# 1 adds the CUDA 12 / cuDNN 9 user-space libraries onnxruntime-gpu needs on a
# serverless GPU profile (the NVIDIA driver comes from the host). 0 keeps the image
# CPU-only: onnxruntime-gpu then runs on its CPU execution provider.
ARG ORT_GPU=0

ENV AzureWebJobsScriptRoot=/home/site/wwwroot \
    AzureFunctionsJobHost__Logging__Console__IsEnabled=true \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

# Dependencies first, so code edits reuse this layer.
# NOTE: then protobuf and grpcio are removed again: the worker's bundled copies come first on
# sys.path and are what the app runs on (docs/platform.md P37, P73); a second, never-imported copy
# only makes readiness list "platform: two copies of protobuf ..." (shared/runtime/doctor.py).
COPY requirements.txt /tmp/requirements.txt
RUN pip install -r /tmp/requirements.txt \
 && pip uninstall -y protobuf grpcio \
 && if [ "$ORT_GPU" = "1" ]; then \
        ORT_VERSION="$(python -c 'import importlib.metadata as m; print(m.version("onnxruntime-gpu"))')" \
        && pip install "onnxruntime-gpu[cuda,cudnn]==${ORT_VERSION}"; \
    fi

# NOTE: the nvidia-* wheels put their .so files under site-packages/nvidia/*/lib;
# ONNX Runtime's CUDA provider finds them through LD_LIBRARY_PATH (or
# onnxruntime.preload_dlls()). Harmless on the CPU image, where the folders are absent.
ENV LD_LIBRARY_PATH=/usr/local/lib/python3.11/site-packages/nvidia/cudnn/lib:/usr/local/lib/python3.11/site-packages/nvidia/cublas/lib:/usr/local/lib/python3.11/site-packages/nvidia/cuda_runtime/lib:/usr/local/lib/python3.11/site-packages/nvidia/cufft/lib:/usr/local/lib/python3.11/site-packages/nvidia/curand/lib:/usr/local/lib/python3.11/site-packages/nvidia/cuda_nvrtc/lib:/usr/local/lib/python3.11/site-packages/nvidia/nvjitlink/lib

COPY . /home/site/wwwroot
