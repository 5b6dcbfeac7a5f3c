"""What a gateway embeds: publish a run's tool events and obey the control topic.

May import core, wire, kafka and settings; never Faust or SQLAlchemy.
"""
