"""The kubelet's pod-resources API v1 (``api.proto``, vendored from kubernetes/kubelet).

``api_pb2`` (and its ``.pyi``) is generated from it by ``scripts/gen-podresources-stubs``. It
imports ``google.protobuf``, which, like ``grpc``, only the ``k8s`` extra installs: nothing imports
this package unless the agent's ``pod_resources_socket`` is set (``connectors.kube_podresources``).
"""
