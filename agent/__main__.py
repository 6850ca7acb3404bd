from agent.service import main

main()
