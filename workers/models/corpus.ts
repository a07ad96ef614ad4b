/**
 * The built-in English corpus the tiny tokenizer's merges are learned from. Original text,
 * written for this project; it only needs common words, punctuation, digits and newlines so the
 * learned merges look like a real English BPE (" the", "ing", " and", ...).
 */
export const TINY_CORPUS = `The quick brown fox jumps over the lazy dog. The dog was not amused, and the fox ran into the forest.
A model reads the prompt, then it writes the answer one token at a time. Each token is a small piece of text.
Serving a language model is mostly about moving data: the prompt goes in, the cache fills up, and the tokens stream out.
When the cache is full, the scheduler must choose which request waits. It is a hard problem, and there is no perfect answer.
In the morning the city is quiet. By noon the streets are full of people walking to work, talking, and buying coffee.
She opened the window and looked at the river. The water was calm, and the boats were moving slowly toward the sea.
He said that the meeting would start at 10:30, but nobody was there until 11:15. "We are late again," she said.
Numbers matter: 1, 2, 3, 10, 42, 100, 256, 1024, 2048, 4096 and 65536 are all powers or friends of two.
The weather today is warm and sunny, with a light wind from the west. Tomorrow it will rain in the north.
Reading books is one of the best ways to learn. Writing is another: when you write, you find out what you think.
The children played in the garden while their parents were cooking dinner in the kitchen.
It's not what you say, it's how you say it. I'm sure they'll understand, and we've got time.
What is the capital of France? The capital of France is Paris. What is the largest ocean? It is the Pacific.
Please write a short story about a robot who learns to paint. The robot lived in a small house near the mountains.
Every morning it looked at the sky and tried to paint the colors it saw: blue, orange, pink and gold.
At first the paintings were strange, but after many days the robot started to understand light and shadow.
The people in the village came to see the paintings, and they were surprised. "This is beautiful," they said.
Computers store text as bytes. A byte has eight bits, and it can hold a value from 0 to 255.
To make the system fast, we keep the hot path simple, we avoid copies, and we measure everything twice.
Thank you for your help! Let me know if you have any other questions, and have a great day.
The train left the station at noon and arrived in the capital three hours later, just before the storm.
Good software is written for people first and for machines second; clear names make the code easy to read.
The history of the world is the story of people who wanted to know more, to travel further, and to build better things.
The teacher asked the students to explain their answers, and the students wrote long and careful notes.
In the evening they walked along the beach and talked about the future, the past, and everything in between.
`;
