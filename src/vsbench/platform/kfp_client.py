"""Submit a pipeline run, or schedule a recurring one, on a Kubeflow Pipelines cluster.

``vsbench submit`` and ``vsbench schedule`` are thin wrappers over :func:`submit` and :func:`schedule`.
Both compile the named pipeline (``vsbench.platform.compile.load_pipeline``) with the cluster settings, so what
reaches the cluster is exactly what ``vsbench compile`` writes and the tests assert: GPUs, node pools,
secrets, the data volume.

Why things are the way they are:

* KFP's recurring-run cron has **six fields, seconds first, evaluated in UTC**. A five-field crontab
  is not rejected by KFP but read seconds-first, so ``0 2 * * *`` would fire every hour at minute 2
  instead of nightly at 02:00; :func:`validate_cron` refuses it before anything is uploaded.
* Credentials come only from the environment (a bearer token in ``$KFP_TOKEN``, or kfp's own
  variables and ``~/.config/kfp/context.json``), never from arguments, so they stay out of shell
  history, process listings and CI logs.
* Arguments are checked against the pipeline's own parameter types before anything is sent: a typo
  in a parameter name fails here, naming the valid ones, instead of as a rejected run on the cluster.
* A recurring run is looked up by name in its experiment before one is created. An existing one is an
  error unless ``replace=True``: two schedules of the same nightly would both run (double GPU cost,
  racing writes to one data root), and silently replacing one someone edited in the UI is worse.
  KFP has no update call for recurring runs, so replacing means creating the new one, then
  deleting the old ones (create first: a failed create leaves the old schedule in place).
* A host that cannot be reached (a typo in ``--host``, a port-forward not running, a name that does not
  resolve) is the user's to fix, so it ends as one line naming the host and what to check
  (:class:`KfpUnreachableError`, a ``ValueError``: exit 2), not as urllib3's ``MaxRetryError`` and a
  traceback file; a server that answers kfp's health check with errors only (not the KFP API) likewise.
  kfp logs each failed health check with its traceback on the root logger: that is caught, not printed.
* The pipeline is uploaded under its ``pipelineInfo.name`` (e.g. ``vsbench-abid``); when that pipeline
  already exists, a new version is uploaded instead, so the UI keeps the history and each recurring run
  pins the exact version it was created with.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import math
import os
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vsbench.platform.cluster import ClusterSettings
from vsbench.platform.compile import load_pipeline

if TYPE_CHECKING:
    import kfp
    from kfp.pipeline_spec import pipeline_spec_pb2

DEFAULT_SERVICE_ACCOUNT = "vsbench-pipeline-runner"  # matches the RBAC in k8s/

# --------------------------------------------------------------------------- cron

_MONTHS = {name: number for number, name in enumerate(
    ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"], start=1)}
_WEEKDAYS = {name: number for number, name in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])}

# (name, lowest, highest, names allowed, "?" allowed): robfig/cron's fields, which KFP's scheduler uses.
_CRON_FIELDS: tuple[tuple[str, int, int, dict[str, int], bool], ...] = (
    ("seconds", 0, 59, {}, False),
    ("minutes", 0, 59, {}, False),
    ("hours", 0, 23, {}, False),
    ("day of month", 1, 31, {}, True),
    ("month", 1, 12, _MONTHS, False),
    ("day of week", 0, 6, _WEEKDAYS, True),
)

_CRON_FORMAT = ("KFP cron has six fields, seconds first, in UTC: "
                "'SECONDS MINUTES HOURS DAY-OF-MONTH MONTH DAY-OF-WEEK', e.g. '0 0 2 * * *' for 02:00 UTC nightly")


def validate_cron(expression: str) -> str:
    """Check a KFP cron expression; returns it with its fields separated by single spaces.

    Each field is a comma-separated list of ``*``, ``?`` (day fields only), ``N`` or ``N-M``, each
    optionally followed by ``/STEP``; month and day of week also take names (``JAN``, ``MON-FRI``).
    Raises ``ValueError`` saying which field is wrong and why, and for a five-field crontab, what the
    six-field equivalent is (KFP would otherwise read it seconds-first, silently meaning another time).
    """
    fields = expression.split()
    if len(fields) == 5:
        raise ValueError(
            f"cron {expression!r} has 5 fields (a crontab); {_CRON_FORMAT}. KFP would read your first field "
            f"as seconds, so this would not run when you expect. Did you mean '0 {' '.join(fields)}'?")
    if len(fields) != 6:
        raise ValueError(f"cron {expression!r} has {len(fields)} fields; {_CRON_FORMAT}")
    for field, (name, low, high, names, question_allowed) in zip(fields, _CRON_FIELDS):
        problem = _cron_field_problem(field, low, high, names, question_allowed)
        if problem:
            raise ValueError(f"cron {expression!r}: {name} field {field!r}: {problem}; {_CRON_FORMAT}")
    return " ".join(fields)


def _is_number(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _cron_field_problem(field: str, low: int, high: int, names: dict[str, int], question_allowed: bool) -> str | None:
    """What is wrong with one cron field, or None when it is valid."""
    for part in field.split(","):
        span, slash, step = part.partition("/")
        if slash and not (_is_number(step) and int(step) > 0):
            return f"step {step!r} must be a positive whole number"
        if span in ("*", "?"):
            if span == "?" and not question_allowed:
                return "'?' is only allowed in the day-of-month and day-of-week fields"
            continue
        bounds = span.split("-")
        if len(bounds) > 2 or not all(bounds):
            return f"{part!r} is not '*', a value, or a range 'N-M'"
        values = []
        for bound in bounds:
            value = int(bound) if _is_number(bound) else names.get(bound.upper())
            if value is None:
                allowed = f" or one of {', '.join(names)}" if names else ""
                return f"{bound!r} is not a number{allowed}"
            if not low <= value <= high:
                return f"{bound} is out of range {low}-{high}"
            values.append(value)
        if values[0] > values[-1]:
            return f"range {span!r} runs backwards"
    return None


# --------------------------------------------------------------------------- arguments

_BOOLEANS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def _parameters(pipeline: str) -> dict[str, pipeline_spec_pb2.ComponentInputsSpec.ParameterSpec]:
    """The pipeline's root parameters: name -> spec (type, default). Cluster settings never change them."""
    return dict(load_pipeline(pipeline).pipeline_spec.root.input_definitions.parameters)


def _type_name(spec: pipeline_spec_pb2.ComponentInputsSpec.ParameterSpec) -> str:
    from kfp.pipeline_spec import pipeline_spec_pb2

    return pipeline_spec_pb2.ParameterType.ParameterTypeEnum.Name(spec.parameter_type)


def _unknown(pipeline: str, name: str, valid: dict[str, Any]) -> ValueError:
    return ValueError(f"pipeline {pipeline!r} has no parameter {name!r}; valid parameters: {', '.join(sorted(valid))}")


def parse_arguments(pairs: list[str], *, pipeline: str) -> dict[str, Any]:
    """``["limit=100", "source=s3://x"]`` -> ``{"limit": 100, "source": "s3://x"}``, typed by the pipeline.

    Values are converted to the type the pipeline declares for the parameter (int, float, bool,
    str; JSON for list and dict parameters), so the cluster receives ``100``, not ``"100"``. Only the
    first ``=`` splits, so values may contain ``=``. Raises ``ValueError`` for a malformed pair, a
    parameter given twice, an unknown parameter (listing the valid ones) or a value of the wrong type.
    """
    parameters = _parameters(pipeline)
    arguments: dict[str, Any] = {}
    for pair in pairs:
        name, equals, text = pair.partition("=")
        name = name.strip()
        if not equals or not name:
            raise ValueError(f"argument {pair!r} is not NAME=VALUE")
        if name not in parameters:
            raise _unknown(pipeline, name, parameters)
        if name in arguments:
            raise ValueError(f"parameter {name!r} is given twice")
        arguments[name] = _convert(name, text, _type_name(parameters[name]))
        if name == "verify_inputs":  # refused here, in one line, rather than by every step on the cluster
            from vsbench.io.storage import checked_verify_inputs

            checked_verify_inputs(arguments[name], name)
    return arguments


def _convert(name: str, text: str, type_name: str) -> Any:
    """One NAME=VALUE text converted to the parameter's declared type."""
    try:
        if type_name == "NUMBER_INTEGER":
            return int(text)
        if type_name == "NUMBER_DOUBLE":
            number = float(text)
            if not math.isfinite(number):  # JSON, and so the KFP API, has no NaN or infinity
                raise ValueError
            return number
        if type_name == "BOOLEAN":
            return _BOOLEANS[text.strip().lower()]
        if type_name in ("LIST", "STRUCT"):
            value = json.loads(text)
            if not isinstance(value, list if type_name == "LIST" else dict):
                raise TypeError
            return value
        return text
    except (ValueError, KeyError, TypeError):
        expected = {"NUMBER_INTEGER": "an integer", "NUMBER_DOUBLE": "a finite number",
                    "BOOLEAN": "true or false", "LIST": "a JSON list", "STRUCT": "a JSON object"}[type_name]
        raise ValueError(f"parameter {name!r} takes {expected}, got {text!r}") from None


_PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "NUMBER_INTEGER": (int,), "NUMBER_DOUBLE": (int, float), "BOOLEAN": (bool,), "STRING": (str,),
    "LIST": (list,), "STRUCT": (dict,)}


def _check_arguments(pipeline: str, arguments: dict[str, Any]) -> None:
    """Refuse unknown names, values of the wrong type and missing required parameters before any upload."""
    parameters = _parameters(pipeline)
    for name, value in arguments.items():
        if name not in parameters:
            raise _unknown(pipeline, name, parameters)
        type_name = _type_name(parameters[name])
        # bool is an int in Python; a True for an int parameter is a mistake, not a 1.
        wrong_bool = isinstance(value, bool) and type_name != "BOOLEAN"
        if wrong_bool or not isinstance(value, _PYTHON_TYPES[type_name]):
            raise ValueError(f"parameter {name!r} is {type_name}, got {type(value).__name__} {value!r}")
    missing = [name for name, spec in parameters.items()
               if name not in arguments and not spec.is_optional and not spec.HasField("default_value")]
    if missing:
        raise ValueError(f"pipeline {pipeline!r} needs parameters without defaults: {', '.join(sorted(missing))}")


# --------------------------------------------------------------------------- client

_PORT_FORWARD = "'kubectl -n kubeflow port-forward svc/ml-pipeline-ui 8080:80', then --host http://localhost:8080"


class KfpUnreachableError(ValueError):
    """The KFP API at ``--host`` could not be talked to: one line naming the host and what to check."""


def _reason(exc: BaseException) -> str:
    """What urllib3 says went wrong, in a few words (the innermost cause of a ``MaxRetryError``)."""
    import urllib3

    cause = getattr(exc, "reason", None) or exc
    errors = urllib3.exceptions
    if "refused" in str(cause).lower():  # before the timeouts: NewConnectionError is a ConnectTimeoutError
        return "connection refused"
    if isinstance(cause, errors.NameResolutionError):
        return "its name does not resolve"
    if isinstance(cause, (errors.ConnectTimeoutError, errors.ReadTimeoutError)):
        return "timed out"
    if isinstance(cause, errors.SSLError):
        return "TLS failed"
    if isinstance(cause, errors.ProxyError):
        return "the proxy failed"
    return str(cause).split(": ", 1)[-1][:120] or type(cause).__name__


def unreachable_message(host: str, why: str) -> str:
    """The one line for a KFP host vsbench could not talk to: the host, why, and what to check."""
    return (f"the Kubeflow Pipelines API at {host} cannot be reached ({why}): check the URL given to --host "
            f"(scheme, host, port, path), and that the port-forward to it is running ({_PORT_FORWARD})")


class _HealthzFailures(logging.Handler):
    """Holds what kfp's health-check retries log (``logging.exception`` on the root logger, a traceback
    each), so they are not printed; the last one's HTTP status goes into the error line."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.statuses: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        error = record.exc_info[1] if record.exc_info else None
        status = getattr(error, "status", None)
        self.statuses.append(f"HTTP {status}" if status else (type(error).__name__ if error else record.getMessage()))


@contextmanager
def _reaching(host: str) -> Iterator[None]:
    """Talk to the KFP API at ``host``: a failure to connect at all becomes :class:`KfpUnreachableError`."""
    import urllib3

    try:
        yield
    except urllib3.exceptions.HTTPError as exc:  # MaxRetryError (refused, unresolved, timed out), ProtocolError
        raise KfpUnreachableError(unreachable_message(host, _reason(exc))) from None

def connect(host: str, *, namespace: str | None = None, token_env: str = "KFP_TOKEN") -> kfp.Client:
    """A ``kfp.Client`` for ``host``, authenticated from the environment only.

    The bearer token is read from ``$<token_env>`` when set (e.g. ``kubectl create token ...`` or an
    OIDC token); otherwise kfp's own mechanisms apply (``KF_PIPELINES_*`` variables, the cookie or
    header in ``~/.config/kfp/context.json``). ``namespace`` is the Kubeflow profile namespace on a
    multi-user cluster; leave it ``None`` on a single-user one.
    """
    import kfp

    if not host:
        raise ValueError("a KFP host is required, e.g. http://localhost:8080 after "
                         "'kubectl -n kubeflow port-forward svc/ml-pipeline-ui 8080:80'")
    options: dict[str, Any] = {"host": host, "existing_token": os.environ.get(token_env) or None}
    if namespace:
        options["namespace"] = namespace
    failures = _HealthzFailures()
    root = logging.getLogger()
    root.addHandler(failures)
    try:
        with warnings.catch_warnings(), _reaching(host):
            # kfp warns on every construction that it needs a v2 backend; we only ever talk to v2beta1.
            warnings.filterwarnings("ignore", message="This client only works with Kubeflow Pipeline",
                                    category=FutureWarning)
            return kfp.Client(**options)
    except TimeoutError:  # kfp's health check answered with errors only, 5 times: not the KFP API, or not ready
        last = failures.statuses[-1] if failures.statuses else "no answer"
        raise KfpUnreachableError(
            f"{host} answers, but not as the Kubeflow Pipelines API (its health check /apis/v2beta1/healthz "
            f"failed 5 times, last: {last}): check the URL given to --host (the API's address, with the path "
            f"it is served under), $KFP_TOKEN on a cluster behind a login, or the port-forward "
            f"({_PORT_FORWARD})") from None
    finally:
        root.removeHandler(failures)


@contextmanager
def _compiled(pipeline: str, cluster: ClusterSettings | None) -> Iterator[tuple[Path, str]]:
    """Compile ``pipeline`` with the cluster settings to a temporary YAML; yields (path, pipelineInfo.name)."""
    from kfp import compiler

    component = load_pipeline(pipeline, cluster or ClusterSettings())
    with tempfile.TemporaryDirectory(prefix="vsbench-kfp-") as tmp:
        path = Path(tmp) / f"{pipeline}.yaml"
        compiler.Compiler().compile(component, package_path=str(path))
        yield path, component.pipeline_spec.pipeline_info.name


def _utc_stamp() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")


def submit(host: str, pipeline: str, *, arguments: dict[str, Any], experiment: str, run_name: str | None = None,
           cluster: ClusterSettings | None = None, service_account: str = DEFAULT_SERVICE_ACCOUNT,
           namespace: str | None = None) -> str:
    """Start one run of ``pipeline`` in ``experiment`` (created if missing); returns the run id.

    The compiled spec travels inline with the run (nothing is uploaded to the pipeline list), which
    suits one-off and ad-hoc runs; :func:`schedule` uploads versions because a recurring run must keep
    pointing at the exact spec it was created with.
    """
    _check_arguments(pipeline, arguments)
    client = connect(host, namespace=namespace)
    with _compiled(pipeline, cluster) as (path, display_name), _reaching(host):
        result = client.create_run_from_pipeline_package(
            str(path), arguments=arguments, run_name=run_name or f"{display_name} {_utc_stamp()}",
            experiment_name=experiment, namespace=namespace, service_account=service_account)
    return result.run_id


def _display_name_filter(name: str) -> str:
    return json.dumps({"predicates": [{"operation": "EQUALS", "key": "display_name", "stringValue": name}]})


def _recurring_runs_named(client: kfp.Client, experiment_id: str, name: str) -> list[str]:
    """Ids of the recurring runs called ``name`` in the experiment (all pages; names are checked here
    too, so a server that ignores the filter cannot make us delete the wrong schedule)."""
    found, token = [], ""
    while True:
        page = client.list_recurring_runs(experiment_id=experiment_id, filter=_display_name_filter(name),
                                          page_size=100, page_token=token)
        found += [run.recurring_run_id for run in page.recurring_runs or [] if run.display_name == name]
        token = page.next_page_token
        if not token:
            return found


def _pipeline_id(client: kfp.Client, name: str, namespace: str | None) -> str | None:
    """The id of the pipeline displayed as ``name`` in ``namespace`` (kfp's get_pipeline_id has no namespace)."""
    pipelines = client.list_pipelines(filter=_display_name_filter(name), namespace=namespace, page_size=2).pipelines
    matches = [p.pipeline_id for p in pipelines or [] if p.display_name == name]
    if len(matches) > 1:
        raise ValueError(f"several KFP pipelines are named {name!r}; delete the extra ones or rename them")
    return matches[0] if matches else None


def _upload(client: kfp.Client, path: Path, name: str, namespace: str | None) -> tuple[str, str]:
    """Upload the compiled YAML as pipeline ``name``, or as a new version of it; returns (pipeline, version) ids.

    Version names carry the UTC time and the first bytes of the YAML's SHA-256, so the UI tells which
    code each version holds and two uploads in one second still differ.
    """
    pipeline_id = _pipeline_id(client, name, namespace)
    if pipeline_id is None:
        pipeline_id = client.upload_pipeline(str(path), pipeline_name=name, namespace=namespace).pipeline_id
        versions = client.list_pipeline_versions(pipeline_id, sort_by="created_at desc", page_size=1)
        if not versions.pipeline_versions:
            raise RuntimeError(f"KFP created pipeline {pipeline_id} ({name}) but lists no version of it")
        return pipeline_id, versions.pipeline_versions[0].pipeline_version_id
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:8]
    version = client.upload_pipeline_version(str(path), f"{name}-{_utc_stamp()}-{digest}", pipeline_id=pipeline_id)
    return pipeline_id, version.pipeline_version_id


def schedule(host: str, pipeline: str, *, cron: str, arguments: dict[str, Any], experiment: str, job_name: str,
             cluster: ClusterSettings | None = None, service_account: str = DEFAULT_SERVICE_ACCOUNT,
             namespace: str | None = None, max_concurrency: int = 1, no_catchup: bool = True,
             replace: bool = False) -> str:
    """Create the recurring run ``job_name`` of ``pipeline`` on ``cron`` (six fields, UTC); returns its id.

    The pipeline is uploaded (a new version when it exists) and the recurring run pins that version.
    ``max_concurrency=1`` keeps a slow night from overlapping the next one; ``no_catchup=True`` runs
    only the latest missed night after a pause instead of a backlog of them. When ``job_name``
    already exists in the experiment, raises ``ValueError`` naming its id, unless ``replace=True``:
    then the new recurring run is created first and the old ones are deleted after.
    """
    cron = validate_cron(cron)
    if max_concurrency < 1:
        raise ValueError(f"max_concurrency must be at least 1, got {max_concurrency}")
    _check_arguments(pipeline, arguments)
    client = connect(host, namespace=namespace)
    with _reaching(host):  # the server may go away between two calls (a port-forward ended)
        experiment_id = client.create_experiment(experiment, namespace=namespace).experiment_id
        existing = _recurring_runs_named(client, experiment_id, job_name)
        if existing and not replace:
            raise ValueError(f"a recurring run named {job_name!r} already exists in experiment {experiment!r} "
                             f"(id {', '.join(existing)}); pass replace=True (--replace) to replace it, "
                             f"or choose another name")
        with _compiled(pipeline, cluster) as (path, display_name):
            pipeline_id, version_id = _upload(client, path, display_name, namespace)
        created = client.create_recurring_run(
            experiment_id, job_name, description=f"vsbench {pipeline} on '{cron}' (UTC)", cron_expression=cron,
            max_concurrency=max_concurrency, no_catchup=no_catchup, params=arguments, pipeline_id=pipeline_id,
            version_id=version_id, enabled=True, service_account=service_account)
        for old in existing:
            client.delete_recurring_run(old)
    return created.recurring_run_id
