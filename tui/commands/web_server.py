"""The web server behind ``serve-web``: textual-serve's, with a one-line banner, and a monitor that
ends with its browser tab.

textual-serve sends a monitor "quit" when its tab goes, and stops reading its output. Two ways it
then runs on, unseen: Textual's web driver loses a quit that comes while the app is still starting
(a tab closed or reloaded at once), and a monitor with output pending blocks on the full pipe (even
SIGTERM only posts a message to the blocked app). Here the output is drained after the quit, and a
monitor still running after a grace period is killed."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aiohttp import WSCloseCode, web
from textual_serve.app_service import AppService
from textual_serve.server import Server

log = logging.getLogger("textual-serve")

QUIT_GRACE_S = 3.0


class MonitorService(AppService):
    """One browser tab's monitor process."""

    async def stop(self) -> None:
        process = self._process
        if process is None or process.returncode is not None:
            await super().stop()
            return
        kill = asyncio.get_running_loop().call_later(QUIT_GRACE_S, _kill, process)
        drain: asyncio.Task[None] | None = None
        if self._task is not None and self._task.done() and process.stdout is not None:
            drain = asyncio.create_task(_drain(process.stdout))  # textual-serve reads no more
        try:
            await super().stop()  # the quit, then the output to its end: the monitor gone
            await process.wait()
        finally:
            kill.cancel()
            if drain is not None:
                drain.cancel()


def _kill(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        process.kill()


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.read(65536):
        pass


class MonitorServer(Server):
    """textual-serve's server, starting a ``MonitorService`` for each websocket."""

    def __init__(self, command: str, *, host: str, port: int, public_url: str, banner: str) -> None:
        super().__init__(command, host=host, port=port, title="eagle3-top", public_url=public_url)
        self.banner = banner
        self.sockets: set[web.WebSocketResponse] = set()

    async def on_startup(self, app: web.Application) -> None:
        print(self.banner, flush=True)  # instead of textual-serve's logo

    async def on_shutdown(self, app: web.Application) -> None:
        # Ctrl+C: aiohttp would wait up to a minute for each open tab; closing them ends their
        # monitors now.
        await asyncio.gather(*(ws.close(code=WSCloseCode.GOING_AWAY) for ws in list(self.sockets)))

    # textual-serve's handler, with our service class in place of its own.
    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        websocket = web.WebSocketResponse(heartbeat=15)
        width = _int(request.query.get("width", "80"), 80)
        height = _int(request.query.get("height", "24"), 24)
        service: MonitorService | None = None

        async def close() -> None:
            await websocket.close()

        try:
            await websocket.prepare(request)
            self.sockets.add(websocket)
            service = MonitorService(
                self.command,
                write_bytes=websocket.send_bytes,
                write_str=websocket.send_str,
                close=close,
                download_manager=self.download_manager,
                debug=self.debug,
            )
            await service.start(width, height)
            await self._process_messages(websocket, service)
        except asyncio.CancelledError:
            await websocket.close()
        except Exception as error:
            log.exception(error)
        finally:
            self.sockets.discard(websocket)
            if service is not None:
                await service.stop()
        return websocket


def _int(text: str, default: int) -> int:
    try:
        return int(text)
    except ValueError:
        return default
