"""The tools the model gets, one module each (`search`, `read`, `count`, `calculate`, `ask_user`,
`submit_answer`), their base (`base.py`) and registry (`registry.py`). See `README.md`."""

from services.agent.tools.ask_user import ASK_USER, AskUserTool, Question, QuestionClosed
from services.agent.tools.base import (
    Tool,
    ToolArgumentsError,
    ToolContext,
    ToolEvent,
    ToolOutcome,
    parse_arguments,
    tool_schema,
)
from services.agent.tools.calculate import CALCULATE, CalculateTool, Calculating, Calculation
from services.agent.tools.count import COUNT, Counting, CountPlan, CountTool
from services.agent.tools.read import READ, Reading, ReadPlan, ReadTool
from services.agent.tools.registry import DEFAULT_TOOLS, ToolRegistry
from services.agent.tools.search import SEARCH, Searching, SearchPlan, SearchQuery, SearchTool
from services.agent.tools.submit_answer import SUBMIT_ANSWER, Answer, CitationRef, SubmitAnswerTool
from services.agent.tools.summarize import SUMMARIZE, SummarizePlan, SummarizeTool, Summarizing
from services.agent.tools.web_search import WEB_SEARCH, WebSearching, WebSearchPlan, WebSearchTool

TOOL_NAMES = DEFAULT_TOOLS.default_names
"""The tools of a run whose request names none."""

__all__ = [
    "ASK_USER",
    "CALCULATE",
    "COUNT",
    "DEFAULT_TOOLS",
    "READ",
    "SEARCH",
    "SUBMIT_ANSWER",
    "SUMMARIZE",
    "TOOL_NAMES",
    "WEB_SEARCH",
    "Answer",
    "AskUserTool",
    "CalculateTool",
    "Calculating",
    "Calculation",
    "CitationRef",
    "CountPlan",
    "CountTool",
    "Counting",
    "Question",
    "QuestionClosed",
    "ReadPlan",
    "ReadTool",
    "Reading",
    "SearchPlan",
    "SearchQuery",
    "SearchTool",
    "Searching",
    "SubmitAnswerTool",
    "SummarizePlan",
    "SummarizeTool",
    "Summarizing",
    "Tool",
    "ToolArgumentsError",
    "ToolContext",
    "ToolEvent",
    "ToolOutcome",
    "ToolRegistry",
    "WebSearchPlan",
    "WebSearchTool",
    "WebSearching",
    "parse_arguments",
    "tool_schema",
]
