"""dlfuse's exceptions: one class per dlfuse_status_t, each an Error carrying the status,
its name and the C side's message. The compiled module raises them (it is handed
ERROR_BY_STATUS when libdlfuse is loaded), and so do the Python layers."""

STATUS_NAMES = {0: "OK", 1: "INVALID_ARGUMENT", 2: "UNSUPPORTED", 3: "NOT_FOUND",
                4: "ABI_MISMATCH", 5: "LOAD_FAILED", 6: "UNAVAILABLE", 7: "OUT_OF_MEMORY",
                8: "DEVICE_ERROR", 9: "INTERNAL"}


class Error(RuntimeError):
    """A dlfuse call failed. ``status`` is the dlfuse_status_t value, ``status_name`` its
    name, ``message`` the C side's message (dlfuse_last_error) when it came from C."""

    def __init__(self, status, message):
        self.status = int(status)
        self.status_name = STATUS_NAMES.get(self.status, str(self.status))
        self.message = message
        super().__init__(f"[{self.status_name}] {message}")


class InvalidArgumentError(Error, ValueError):
    pass


class UnsupportedError(Error):
    pass


class NotFoundError(Error, LookupError):
    pass


class AbiMismatchError(Error):
    pass


class LoadFailedError(Error):
    pass


class UnavailableError(Error):
    pass


class OutOfMemoryError(Error, MemoryError):
    pass


class DeviceError(Error):
    pass


class InternalError(Error):
    pass


# Indexed by dlfuse_status_t (0, OK, is never raised: Error stands there).
ERROR_BY_STATUS = (Error, InvalidArgumentError, UnsupportedError, NotFoundError,
                   AbiMismatchError, LoadFailedError, UnavailableError, OutOfMemoryError,
                   DeviceError, InternalError)


def error_of(status, message):
    """The exception for a status and its message."""
    cls = ERROR_BY_STATUS[status] if 0 < status < len(ERROR_BY_STATUS) else Error
    return cls(status, message)
