"""Who the API server says we are: `authenticated_user` (a SelfSubjectReview,
authentication.k8s.io/v1, Kubernetes >= 1.28; every authenticated user may create one).

spilloverctl records this name with each change it makes (`change_record`): the name
the admission policy compares with the request's `userInfo.username`, never the
`$USER` of the machine it runs on. Impersonating (`as` in the kubeconfig, `--as`), the
review carries the Impersonate-* headers like every request, and the API server
answers with the impersonated user: the one every request acted as."""

from __future__ import annotations

from spillover_operator.client._api import request
from spillover_operator.client.connection import Connection
from spillover_operator.client.errors import ApiUnavailable

PATH = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
RESOURCE = "selfsubjectreviews.authentication.k8s.io"


def authenticated_user(conn: Connection) -> str:
    """The username the API server authenticated the connection's credentials as."""
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    answer = request(
        conn,
        "POST",
        PATH,
        verb="create",
        resource=RESOURCE,
        what="a SelfSubjectReview (who am I)",
        body=body,
        content_type="application/json",
    )
    status = answer.get("status")
    info = status.get("userInfo") if isinstance(status, dict) else None
    name = info.get("username") if isinstance(info, dict) else None
    if not isinstance(name, str) or not name:
        raise ApiUnavailable("the API server's SelfSubjectReview named no user")
    return name
