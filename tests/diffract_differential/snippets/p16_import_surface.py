"""Point 16: import paths and ParameterType."""

SNIPPETS = [
    {
        "id": "p16.resolver",
        "what": "diffract.session.resolver: FieldSelector, resolve, render_label",
        "code": """
import importlib
def names():
    m = importlib.import_module("diffract.session.resolver")
    return {n: hasattr(m, n) for n in ("FieldSelector", "resolve", "render_label")}
out["resolver"] = catch(names)
""",
    },
    {
        "id": "p16.session_context",
        "what": "from diffract.session.session import SessionContext; a scope is one",
        "code": """
def check():
    from diffract import Session
    from diffract.session.session import SessionContext
    return isinstance(Session(profile="ram").filter(model_ids=["x"]), SessionContext)
out["scope is SessionContext"] = catch(check)
""",
    },
    {
        "id": "p16.compute_names",
        "what": "diffract.core.compute exports KernelConfig, KernelExecutor, KernelRegistry, ...",
        "code": """
import importlib
def has():
    m = importlib.import_module("diffract.core.compute")
    return {n: hasattr(m, n) for n in ("KernelConfig", "KernelExecutor", "KernelRegistry",
            "KernelExecutionError", "kernel", "register_default_kernels", "InconsistentWiring",
            "InconsistentWiringError", "KernelError", "InvalidConfigurationError",
            "DependencyNotFoundError", "CircularDependencyError", "KernelApplyLevel",
            "KernelExecutionProtocol", "KernelRestrictions")}
out["names"] = catch(has)
""",
    },
    {
        "id": "p16.exception_tree",
        "what": "the compute errors are KernelErrors (diffract.core.compute and .exceptions)",
        "code": """
from diffract.core import compute as c
names = ("KernelExecutionError", "InconsistentWiring", "InconsistentWiringError",
         "DependencyNotFoundError", "CircularDependencyError")
out["subclass"] = {n: catch(lambda n=n: issubclass(getattr(c, n), c.KernelError)) for n in names}
def invalid_configuration():
    from diffract.core.compute.exceptions import InvalidConfigurationError
    return issubclass(InvalidConfigurationError, c.KernelError)
out["InvalidConfigurationError"] = catch(invalid_configuration)
""",
    },
    {
        "id": "p16.kernel_config",
        "what": "KernelConfig(rtol=1e-5).as_dict() and .update",
        "code": """
def use():
    from diffract.core.compute import KernelConfig
    k = KernelConfig(rtol=1e-5)
    k.update(KernelConfig(rtol=1e-3))
    return k.as_dict()
out["config"] = catch(use)
""",
    },
    {
        "id": "p16.parameter_type_intflag",
        "what": "ParameterType is an IntFlag with UNKNOWN = 0, DENSE = 1",
        "code": """
import enum
from diffract import ParameterType
out["intflag"] = issubclass(ParameterType, enum.IntFlag)
out["UNKNOWN"] = catch(lambda: int(ParameterType.UNKNOWN))
out["DENSE"] = catch(lambda: int(ParameterType.DENSE))
""",
    },
    {
        "id": "p16.parameter_type_from_string",
        "what": 'ParameterType.from_string("dense") and of a new name',
        "isolate": True,
        "code": """
from diffract import ParameterType
out["dense"] = catch(lambda: ParameterType.from_string("dense").name)
out["new"] = catch(lambda: ParameterType.from_string("attention").name)
""",
    },
    {
        "id": "p16.session_errors",
        "what": "diffract.session exports the error classes and summaries",
        "code": """
import diffract.session as m
out["names"] = {n: hasattr(m, n) for n in ("SessionError", "ModelNotFoundError", "ModelAlreadyExistsError",
    "KernelNotFoundError", "ScopeValidationError", "InvalidIdentifierError", "IncompatibleStoreError",
    "ApplySummary", "EraseSummary", "ParameterType", "ParameterOverrides")}
""",
    },
    {
        "id": "p16.execution_enums",
        "what": "diffract.core.compute.execution enums and members",
        "code": """
from diffract.core.compute.execution import KernelApplyLevel, KernelExecutionProtocol, KernelRestrictions
out["levels"] = [m.name for m in KernelApplyLevel]
out["protocols"] = [m.name for m in KernelExecutionProtocol]
out["restrictions"] = [m.name for m in KernelRestrictions]
""",
    },
    {
        "id": "p16.namespaces_module",
        "what": "diffract.session.namespaces classes",
        "code": """
import importlib
def has():
    m = importlib.import_module("diffract.session.namespaces")
    return {n: hasattr(m, n) for n in ("ModelsNamespace", "ComputeNamespace", "ResultsNamespace", "VizNamespace", "UtilsNamespace")}
out["names"] = catch(has)
""",
    },
]
